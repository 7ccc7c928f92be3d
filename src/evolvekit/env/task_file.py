"""Task files (JSONL, one Task per line): read with a clear error, and always person-written."""

from __future__ import annotations

import logging
from pathlib import Path

from evolvekit.safejson import read_jsonl
from evolvekit.types import Task, TaskSource

log = logging.getLogger(__name__)


# the bounds of one task file: a family's generator caps at 100,000 tasks; one task (its request, reference and initial
# state) fits in a MiB with room to spare (BFCL's largest is tens of KiB)
MAX_TASKS_IN_FILE = 100_000
MAX_TASK_FILE_BYTES = 256 * 2**20
MAX_TASK_LINE_BYTES = 2**20


def load_task_file(path: str | Path) -> list[Task]:
    """Tasks from a JSONL file (one Task per line), with a clear error for a missing or malformed file. A task's
    origin is where it came from, never a label inside an outside file: every task read from a file is
    person-written (``TaskSource.REAL``), whatever its ``source`` says; only tasks this run synthesized, and
    recorded as such in its own store, are synthetic (src/evolvekit/boundary.py). Every reader of a task file goes
    through here (tests/cpu/test_task_files.py walks src/ for others); a file over the caps is a ``ConfigError``."""
    tasks = read_jsonl(path, Task, "a task", MAX_TASK_FILE_BYTES, MAX_TASKS_IN_FILE, MAX_TASK_LINE_BYTES)
    relabelled = sum(t.source != TaskSource.REAL for t in tasks)
    if relabelled:
        log.info(
            "%s: %d tasks say they are synthetic; read from a file, they count as person-written", path, relabelled
        )
    return [t if t.source == TaskSource.REAL else t.model_copy(update={"source": TaskSource.REAL}) for t in tasks]
