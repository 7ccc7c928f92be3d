"""Task files (JSONL, one Task per line): read with a clear error, and always person-written."""

from __future__ import annotations

import logging

from evolvekit.safejson import read_jsonl
from evolvekit.types import Task, TaskSource

log = logging.getLogger(__name__)


def load_task_file(path: str) -> list:
    """Tasks from a JSONL file (one Task per line), with a clear error for a missing or malformed file. A task's
    origin is where it came from, never a label inside an outside file: every task read from a file is
    person-written (``TaskSource.REAL``), whatever its ``source`` says; only tasks this run synthesized, and
    recorded as such in its own store, are synthetic (src/evolvekit/boundary.py)."""
    tasks = read_jsonl(path, Task, "a task")
    relabelled = sum(t.source != TaskSource.REAL for t in tasks)
    if relabelled:
        log.info(
            "%s: %d tasks say they are synthetic; read from a file, they count as person-written", path, relabelled
        )
    return [t if t.source == TaskSource.REAL else t.model_copy(update={"source": TaskSource.REAL}) for t in tasks]
