"""Issue 99.1: every task file goes through one loader (env/task_file.load_task_file). The place decides a task's
origin, never the file; a file has a count cap, a size cap and a line cap, each a clear exit 2."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evolvekit.boundary import InformationBoundary
from evolvekit.errors import ConfigError
from evolvekit.types import Task, TaskSource, ToolCall

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "evolvekit"
LOADER = "env/task_file.py"
STORE = "store/sqlite.py"  # the run's own store: its tasks are the run's, not an outside file's


def task_readers(source: str) -> list[int]:
    """Lines of ``source`` that read tasks from JSON text other than through the loader: ``read_jsonl(_, Task,
    ...)`` or ``Task.model_validate_json(...)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name == "read_jsonl" and len(node.args) > 1 and getattr(node.args[1], "id", None) == "Task":
            found.append(node.lineno)
        if (
            isinstance(f, ast.Attribute)
            and name in ("model_validate_json", "model_validate")
            and getattr(f.value, "id", None) == "Task"
        ):
            found.append(node.lineno)
    return found


def test_no_reader_of_task_files_but_the_loader():
    offenders = {
        str(p.relative_to(SRC)): lines
        for p in sorted(SRC.rglob("*.py"))
        if str(p.relative_to(SRC)) not in (LOADER, STORE) and (lines := task_readers(p.read_text()))
    }
    assert offenders == {}
    # the walk sees each way of reading one
    assert task_readers("read_jsonl(p, Task, 'a task')\nTask.model_validate_json(x)\nread_jsonl(p, E, 'e')") == [1, 2]
    assert task_readers((SRC / LOADER).read_text()) and task_readers((SRC / STORE).read_text())


def _relabelled(path: Path, n: int = 2) -> Path:
    tasks = [
        Task(
            task_id=f"t{i}",
            env_name="mcp",
            query=f"Make the folder /sandbox/d{i}.",
            reference_solution=[[ToolCall(name="create_directory", arguments={"path": f"/sandbox/d{i}"})]],
            source=TaskSource.SYNTHETIC,  # a person's file that says it is synthetic
        )
        for i in range(n)
    ]
    path.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    return path


def test_an_mcp_task_file_relabelled_synthetic_stays_person_written_and_its_gold_closed(tmp_path):
    """Round four's hole: env.mcp.tasks_file believed the file's own "source": "synthetic"."""
    from evolvekit.config import load_config
    from evolvekit.env.mcp import mcp_tasks

    path = _relabelled(tmp_path / "tasks.jsonl")
    cfg = load_config(None, ["env.name=mcp", "env.mcp.command=[node]", f"env.mcp.tasks_file={path}"])
    tasks = mcp_tasks(cfg.env, "all")
    assert len(tasks) == 2 and {t.source for t in tasks} == {TaskSource.REAL}
    closed = InformationBoundary()
    assert all(closed.reference(t) is None and closed.task_view(t).reference_solution is None for t in tasks)


@pytest.mark.parametrize(
    "cap, content, message",
    [
        ("MAX_TASKS_IN_FILE", "three lines", "3 lines, more than the 2"),
        ("MAX_TASK_FILE_BYTES", "big", "MiB one file may hold"),
        ("MAX_TASK_LINE_BYTES", "long line", ":1: over"),
    ],
)
def test_a_task_file_over_a_cap_is_refused_before_any_task_is_read(tmp_path, monkeypatch, cap, content, message):
    import evolvekit.env.task_file as tf

    path = _relabelled(tmp_path / "tasks.jsonl", 3)
    limits = {"MAX_TASKS_IN_FILE": 2, "MAX_TASK_FILE_BYTES": 100, "MAX_TASK_LINE_BYTES": 1024 + 100}
    if content == "long line":
        path.write_text(json.dumps({"task_id": "x", "env_name": "mcp", "query": "q" * 3000}) + "\n")
    monkeypatch.setattr(tf, cap, limits[cap])
    with pytest.raises(ConfigError, match=message):
        tf.load_task_file(str(path))
    monkeypatch.setattr(tf, cap, getattr(tf, cap) * 10**6)
    assert tf.load_task_file(str(path))


def test_tasks_check_on_a_file_past_the_count_cap_exits_2_with_one_line(tmp_path):
    from evolvekit.env.task_file import MAX_TASKS_IN_FILE

    path = tmp_path / "many.jsonl"
    line = Task(task_id="t", env_name="bfcl", query="q").model_dump_json() + "\n"
    path.write_text(line * (MAX_TASKS_IN_FILE + 1))
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "tasks", "check", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr[-2000:]
    assert f"more than the {MAX_TASKS_IN_FILE}" in res.stderr


def test_tasks_check_says_why_each_infeasible_task_is_infeasible_in_text_and_json(tmp_path):
    meta = {"category": "synthetic", "involved_classes": ["MathAPI"]}
    bad = {"task_id": "t1", "env_name": "bfcl", "query": "Add 1 and 2.", "metadata": meta,
           "reference_solution": [[{"name": "divide", "arguments": {"a": 1, "b": 0}}]]}  # fmt: skip
    good = {**bad, "task_id": "t2", "reference_solution": [[{"name": "add", "arguments": {"a": 1, "b": 2}}]]}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(bad) + "\n" + json.dumps(good) + "\n")

    def check(*extra: str):
        return subprocess.run(
            [sys.executable, "-m", "evolvekit.cli.main", "tasks", "check", str(path), *extra],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )

    text = check()
    assert text.returncode == 0, text.stderr[-2000:]
    lines = text.stdout.strip().splitlines()
    assert lines[0] == "1/2 feasible" and lines[1].startswith("infeasible t1: ")
    reason = lines[1].removeprefix("infeasible t1: ")
    assert reason and "divide" in reason
    as_json = check("--json")
    assert json.loads(as_json.stdout.strip().splitlines()[-1])["infeasible"] == [
        {"task_id": "t1", "feasible": False, "reason": reason}
    ]
    path.write_text(json.dumps(bad) + "\n")
    none = check()
    assert none.returncode == 1 and none.stderr.strip() == f"{path}: task t1: {reason}; no task is feasible"
