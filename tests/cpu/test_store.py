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


def _episode(steps: int, obs_tokens: int = 40, completion_tokens: int = 20) -> Trajectory:
    """A multi-step episode whose prompt at each step is the previous prompt + completion + an observation."""
    prompt = list(range(100))  # system prompt and request
    out = []
    for k in range(steps):
        completion = [1000 + k * completion_tokens + j for j in range(completion_tokens)]
        out.append(
            Step(
                index=k,
                action_text=f"call {k}",
                prompt_token_ids=list(prompt),
                completion_token_ids=completion,
                completion_logprobs=[-0.5] * completion_tokens,
            )
        )
        prompt = prompt + completion + [5000 + k * obs_tokens + j for j in range(obs_tokens)]
    return Trajectory(task_id="t1", group_id="g", steps=out, outcome_reward=1.0)


def test_stored_episode_round_trips_and_grows_linearly(tmp_path):
    from evolvekit.store.codec import decode_trajectory, encode_trajectory

    t = _episode(6)
    t.steps[3].prompt_token_ids = [7, 7] + t.steps[3].prompt_token_ids[5:]  # a rewritten history: no shared prefix
    assert decode_trajectory(encode_trajectory(t)) == t
    sizes = {n: len(encode_trajectory(_episode(n))) for n in (8, 16, 32)}
    whole = {n: len(_episode(n).model_dump_json()) for n in (8, 16, 32)}
    # doubling the episode doubles the stored size (linear); whole prompts roughly quadruple it (quadratic)
    assert sizes[32] / sizes[16] < 2.2 and sizes[16] / sizes[8] < 2.2
    assert whole[32] / whole[16] > 3.0
    store = RunStore(tmp_path / "run.sqlite")
    ep = _episode(5)
    with store.transaction() as c:
        store.put_trajectories(c, [ep], 0, "train")
    assert store.trajectories(0) == [ep]
    store.close()


def test_annotations_are_stored_apart_from_the_body(tmp_path):
    store = RunStore(tmp_path / "run.sqlite")
    t = _episode(2)
    with store.transaction() as c:
        store.put_trajectories(c, [t], 0, "train")
    body = sqlite3.connect(tmp_path / "run.sqlite").execute("SELECT json FROM trajectories").fetchone()[0]
    t.step_attributions = [StepLabel.GOOD, StepLabel.BAD]
    t.attribution_source = "grounded"
    t.flags.attribution_neutralised = True
    with store.transaction() as c:
        store.update_trajectories(c, [t])
    con = sqlite3.connect(tmp_path / "run.sqlite")
    assert con.execute("SELECT json FROM trajectories").fetchone()[0] == body  # the body is written once
    (back,) = store.trajectories(0)
    assert back.step_attributions == [StepLabel.GOOD, StepLabel.BAD] and back.attribution_source == "grounded"
    assert back.flags.attribution_neutralised and back == t
    assert [r[0] for r in con.execute("SELECT label FROM steps ORDER BY step_index")] == ["GOOD", "BAD"]
    store.close()


def test_a_schema_1_store_is_migrated_and_still_readable(tmp_path):
    path = tmp_path / "run.sqlite"
    con = sqlite3.connect(path)
    con.executescript(  # the trajectories table as schema 1 wrote it: whole prompts, no annotations column
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE trajectories (trajectory_id TEXT PRIMARY KEY, iteration INTEGER NOT NULL, phase TEXT NOT NULL,"
        " task_id TEXT NOT NULL, group_id TEXT, outcome_reward REAL, experience_guided INTEGER NOT NULL,"
        " failed INTEGER NOT NULL, json TEXT NOT NULL);"
    )
    old = _episode(3)
    old.step_attributions = [StepLabel.GOOD] * 3
    con.execute(
        "INSERT INTO trajectories VALUES (?, 0, 'train', 't1', 'g', 1.0, 0, 0, ?)",
        (old.trajectory_id, old.model_dump_json()),
    )
    con.commit()
    con.close()
    store = RunStore(path)
    assert store.get_meta("schema_version") == "2"
    assert store.trajectories(0) == [old]
    from evolvekit.store.sqlite import read_trajectory

    assert read_trajectory(sqlite3.connect(path), old.trajectory_id) == old
    store.close()


def test_tasks_are_parsed_once_and_follow_the_table(tmp_path):
    store = RunStore(tmp_path / "run.sqlite")
    a, b = Task(task_id="a", env_name="x", query="q"), Task(task_id="b", env_name="x", query="q")
    with store.transaction() as c:
        store.put_tasks(c, [a], 0)
    index = store.task_index()
    assert store.task_index() is index and list(index) == ["a"]  # cached, not re-parsed
    with store.transaction() as c:
        store.put_tasks(c, [b, Task(task_id="a", env_name="x", query="changed")], 1)
    assert [t.query for t in store.tasks()] == ["q", "q"]  # the first stored version of an id wins, as in SQLite
    with pytest.raises(RuntimeError):
        with store.transaction() as c:
            store.put_tasks(c, [Task(task_id="c", env_name="x", query="q")], 2)
            raise RuntimeError("crash")
    assert [t.task_id for t in store.tasks()] == ["a", "b"]  # nothing of the rolled-back transaction
    store.close()


def test_rollback_to_before_training_keeps_self_questioning_tasks_and_their_marker(tmp_path):
    """Issue 52 (2): with the only checkpoint damaged, resume rolls back to the initial policy. It deleted the
    synthesized tasks (first_iteration -1) but kept the 'synthesis done' marker, so every later resume exited 2."""
    from evolvekit.types import Task, TaskSource

    store = RunStore(tmp_path / "run.sqlite")
    made = Task(task_id="syn", env_name="x", query="q", source=TaskSource.SYNTHETIC, metadata={"curation": {}})
    real = Task(task_id="real", env_name="x", query="q")
    with store.transaction() as c:
        store.put_tasks(c, [made], -1)
        store.put_tasks(c, [real], 0)
    store.set_meta("synthesis_funnel", "{}")
    store.rollback_after(-2)
    assert [t.task_id for t in store.tasks()] == ["syn"] and store.get_meta("synthesis_funnel") == "{}"
    store.close()


def test_checkpoint_paths_are_relative_so_a_copied_run_resumes_from_its_own_files(tmp_path):
    import shutil

    run = tmp_path / "run"
    (run / "checkpoints" / "iter-0000").mkdir(parents=True)
    store = RunStore(run / "run.sqlite")
    with store.transaction() as c:
        store.put_checkpoint(c, 0, str(run / "checkpoints" / "iter-0000"))
    stored = store._conn.execute("SELECT path FROM checkpoints").fetchone()[0]
    assert stored == "checkpoints/iter-0000"
    store.close()
    shutil.copytree(run, tmp_path / "copy")
    shutil.rmtree(run)
    copy = RunStore(tmp_path / "copy" / "run.sqlite")
    assert copy.latest_checkpoint().path == str(tmp_path / "copy" / "checkpoints" / "iter-0000")
    # a store written before paths were relative: the absolute path is read from this folder's own copy
    with copy.transaction() as c:
        c.execute("UPDATE checkpoints SET path = ?", (str(run / "checkpoints" / "iter-0000"),))
    assert copy.latest_checkpoint().path == str(tmp_path / "copy" / "checkpoints" / "iter-0000")
    copy.close()


def test_one_damaged_row_of_any_kind_is_skipped_or_redone_not_fatal(tmp_path, caplog):
    """Issue 52 (2): resume works after any single damaged store row. A damaged experience, task or evaluation row is
    skipped with one warning (the evaluation is made again); a damaged trajectory row is skipped by a plain read and
    makes a strict read (a resumed iteration reusing its rollouts) raise, so that iteration is rolled out again."""
    from evolvekit.store.sqlite import DamagedRows

    path = tmp_path / "run.sqlite"
    store = RunStore(path)
    exps = [Experience(when_to_use=f"when {i}", content=f"do {i}") for i in range(3)]
    with store.transaction() as c:
        store.put_tasks(c, [Task(task_id=f"t{i}", env_name="bfcl", query="q") for i in range(2)], 0)
        store.put_trajectories(c, [_traj("t0"), _traj("t1")], 0, "train")
        store.put_experiences(c, exps, 0)
        store.put_evaluation(c, "after", {"avg@8": 0.5})
    store.close()
    raw = sqlite3.connect(path)
    for table in ("experiences", "tasks", "trajectories"):
        raw.execute(f"UPDATE {table} SET json = ? WHERE rowid = (SELECT MIN(rowid) FROM {table})", ('{"cut',))
    raw.execute("UPDATE evaluations SET json = '[1, ' WHERE phase = 'after'")
    raw.commit()
    raw.close()
    store = RunStore(path)
    with caplog.at_level("WARNING"):
        assert [e.content for e in store.experiences()] == ["do 1", "do 2"]
        assert list(store.task_index()) == ["t1"]
        assert [t.task_id for t in store.trajectories(0)] == ["t1"]
        assert store.evaluation("after") is None
    assert sum("damaged" in r.getMessage() for r in caplog.records) == 4
    with pytest.raises(DamagedRows, match="1 damaged trajectory rows"):
        store.trajectories(0, strict=True)
    store.close()


def test_damaged_experience_vectors_are_embedded_again(caplog):
    import logging

    import numpy as np

    from evolvekit.navigating.parts import stored_vectors

    exps = [Experience(when_to_use=f"when {i}", content=f"do {i}") for i in range(2)]
    good = {e.experience_id: np.ones(4, dtype=np.float32).tobytes() for e in exps}
    assert stored_vectors(exps, good).shape == (2, 4)
    with caplog.at_level(logging.WARNING, logger="evolvekit.navigating.parts"):
        assert stored_vectors(exps, {**good, exps[1].experience_id: b"\x00" * 6}) is None  # cut mid-float
    assert [r.getMessage() for r in caplog.records] == [
        "run store: damaged experience vectors; embedding the 2 stored experiences again"
    ]
    assert stored_vectors(exps, {**good, exps[1].experience_id: b"\x00" * 8}) is None  # another length
    assert stored_vectors(exps, {exps[0].experience_id: good[exps[0].experience_id]}) is None  # one missing


def test_retrievals_are_counted_from_the_trajectories_so_a_resumed_iteration_keeps_them():
    from evolvekit.navigating.stage import guided_vs_vanilla

    trajs = [_traj("t0", "g0"), _traj("t0", "g0"), _traj("t1", "g1"), _traj("t2", "g2")]
    for t in trajs[:3]:
        t.flags.experience_guided = True
    m = guided_vs_vanilla(trajs)
    assert m["navigating/retrievals"] == 2.0 and m["navigating/guided_rollouts"] == 3.0
