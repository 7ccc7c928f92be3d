"""Which code made a run: the git commit of the source tree evolvekit was imported from, recorded in every run's
store (``meta.code``) so that results files can name the code of each row without being told."""

from __future__ import annotations

import subprocess
from pathlib import Path

import evolvekit

DIRTY = " (uncommitted changes)"


def code_commit(root: Path | None = None) -> str:
    """The short commit of the checkout holding evolvekit's source, with ``DIRTY`` appended when tracked files under
    ``src`` or ``configs`` differ from it; ``evolvekit <version>`` when the package is not in a git checkout (an
    installed wheel) or git is unavailable."""
    root = root or Path(evolvekit.__file__).resolve().parents[2]
    fallback = f"evolvekit {evolvekit.__version__}"
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0 or not head.stdout.strip():
            return fallback
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "src", "configs"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return fallback
    return head.stdout.strip() + (DIRTY if dirty.stdout.strip() else "")
