"""The SQLite run store: WAL, transactional writes, status bookkeeping, round trips."""

import sqlite3

import pytest

from evolvekit.store.sqlite import IterationStatus, RunStore
from evolvekit.types import Experience, Step, StepLabel, Task, Trajectory


def _traj(task_id="t1", group="g"):
    return Trajectory(
        task_id=task_id,
        group_id=group,
        outcome_reward=1.0,
        steps=[Step(index=0, action_text="a", observation="o"), Step(index=1, action_text="b")],
        step_attributions=[StepLabel.GOOD, StepLabel.BAD],
    )


def test_wal_and_round_trip(tmp_path):
    store = RunStore(tmp_path / "run.sqlite")
    mode = sqlite3.connect(tmp_path / "run.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    t = _traj()
    with store.transaction() as c:
        store.put_tasks(c, [Task(task_id="t1", env_name="bfcl", query="q")], 0)
        store.put_trajectories(c, [t], 0, "train")
        store.put_metrics(c, 0, {"a": 1.5})
        store.put_checkpoint(c, 0, "/ckpt/0")
        store.put_experiences(c, [Experience(when_to_use="w", content="c")], 0)
        store.set_iteration(c, 0, IterationStatus.DONE)
    assert store.trajectories(0)[0] == t
    assert store.tasks()[0].task_id == "t1"
    assert store.metrics() == {0: {"a": 1.5}}
    assert store.latest_checkpoint().path == "/ckpt/0"
    assert store.next_iteration() == 1
    assert store.experiences()[0].content == "c"
    labels = sqlite3.connect(tmp_path / "run.sqlite").execute("SELECT label FROM steps ORDER BY step_index").fetchall()
    assert labels == [("GOOD",), ("BAD",)]


def test_failed_transaction_writes_nothing(tmp_path):
    store = RunStore(tmp_path / "run.sqlite")
    with pytest.raises(RuntimeError):
        with store.transaction() as c:
            store.put_trajectories(c, [_traj()], 0, "train")
            store.set_iteration(c, 0, IterationStatus.ROLLED_OUT)
            raise RuntimeError("crash")
    assert store.count("trajectories") == 0 and store.count("steps") == 0
    assert store.iteration_status(0) is None
    # a duplicate primary key aborts the whole transaction, too
    t = _traj()
    with store.transaction() as c:
        store.put_trajectories(c, [t], 0, "train")
    with pytest.raises(sqlite3.IntegrityError):
        with store.transaction() as c:
            store.put_metrics(c, 0, {"x": 1})
            store.put_trajectories(c, [t], 0, "train")
    assert store.metrics() == {}


def test_iteration_status_and_redo(tmp_path):
    store = RunStore(tmp_path / "run.sqlite")
    with store.transaction() as c:
        store.set_iteration(c, 0, IterationStatus.DONE)
        store.set_iteration(c, 1, IterationStatus.ROLLED_OUT)
        store.put_trajectories(c, [_traj()], 1, "train")
    assert store.completed_iterations() == [0] and store.next_iteration() == 1
    with store.transaction() as c:  # redoing the rollouts of an iteration replaces, never duplicates
        store.delete_iteration_trajectories(c, 1, "train")
        store.put_trajectories(c, [_traj()], 1, "train")
    assert store.count("trajectories") == 1 and store.count("steps") == 2
    with pytest.raises(ValueError):
        store.count("sqlite_master; DROP TABLE x")
