"""The checks people rely on, run by the test command CI runs: ruff (lint and format) and mypy on src/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / cmd[0]), *cmd[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_lint_and_format_are_clean():
    lint = _run("ruff", "check", "src", "tests", "benchmarks", "examples")
    assert lint.returncode == 0, lint.stdout[-3000:]
    fmt = _run("ruff", "format", "--check", "src", "tests", "benchmarks", "examples")
    assert fmt.returncode == 0, fmt.stdout[-3000:]


@pytest.mark.slow
def test_mypy_is_clean_on_src():
    res = _run("mypy")  # settings in pyproject.toml [tool.mypy]: files = src, check_untyped_defs
    assert res.returncode == 0, res.stdout[-3000:]
