"""The master loop (orchestrator/loop.py) with recorded stand-in stages and no model: what it calls, in which order,
with which seeds, what it commits and when, how a resumed run goes on, when it evaluates and which checkpoints it
keeps. The fast twins of test_run_loop.py's runs (issue 77.2): a mutation look of loop.py runs these."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path
from typing import Callable

import pytest
from rich.console import Console

from evolvekit.config import load_config
from evolvekit.orchestrator.loop import (
    SYNTHESIS_DONE,
    MasterLoop,
    Stages,
    SynthesisStage,
    iteration_seed,
    run_synthesis,
)
from evolvekit.orchestrator.run_dir import open_run
from evolvekit.questioning.explore import ExplorationTrace
from evolvekit.questioning.pipeline import Funnel
from evolvekit.store.sqlite import IterationStatus
from evolvekit.types import Step, StepLabel, Task, TaskSource, ToolCall, Trajectory


class _Calls(list):
    def add(self, *what):
        self.append(what)


class _Supply:
    def __init__(self, calls: _Calls) -> None:
        self.calls = calls
        gold = [[ToolCall(name="add", arguments={"a": 1, "b": 2})]]  # a person-written reference solution
        self.pool = [Task(task_id=f"t{i}", env_name="bfcl", query=f"q{i}", reference_solution=gold) for i in range(3)]

    def training_set(self):
        return list(self.pool)

    def tasks(self, ctx):
        self.calls.add("tasks", ctx.iteration, ctx.seed)
        return [self.pool[ctx.iteration % 3], self.pool[(ctx.iteration + 1) % 3]]

    def observe(self, ctx, trajectories):
        self.calls.add("observe", ctx.iteration, len(trajectories))
        return {"coevolve/signals": float(len(trajectories))}  # what CoEvolve's hook reports

    def commit(self, c, store, iteration):
        self.calls.add("supply.commit", iteration)
        store.put_tasks(c, [Task(task_id=f"new{iteration}", env_name="bfcl", query="made")], iteration)


class _Rollouts:
    last_metrics = {"judge/calls": 2.0}

    def __init__(self, calls: _Calls) -> None:
        self.calls = calls

    def rollout(self, ctx, tasks):
        self.calls.add("rollout", ctx.iteration, [t.task_id for t in tasks])
        step = Step(index=0, action_text="x", tool_calls=[ToolCall(name="add")])
        return [
            Trajectory(task_id=t.task_id, group_id=f"g{ctx.iteration}", outcome_reward=float(i % 2), steps=[step])
            for i, t in enumerate(tasks)
        ]


class _Experience:
    def __init__(self, calls: _Calls) -> None:
        self.calls = calls

    def process(self, ctx, trajectories):
        self.calls.add("experience", ctx.iteration, len(trajectories))
        return {"experience/added": 1.0}

    def commit(self, c, store, iteration):
        self.calls.add("experience.commit", iteration)
        store.put_meta(c, "experience_pool", f"as of {iteration}")  # e.g. the pool, in the iteration's transaction


class _Samples:
    def __init__(self, calls: _Calls) -> None:
        self.calls = calls

    def build(self, ctx, trajectories):
        self.calls.add("samples", ctx.iteration, len(trajectories))
        for t in trajectories:
            t.step_attributions = [StepLabel.GOOD] * len(t.steps)  # step credit, stored with the iteration
        return ["s"] * len(trajectories), {"samples/count": float(len(trajectories))}


class _Updater:
    def __init__(self, calls: _Calls, fail_at: int | None = None) -> None:
        self.calls, self.fail_at = calls, fail_at

    def update(self, ctx, samples):
        self.calls.add("update", ctx.iteration, len(samples))
        if ctx.iteration == self.fail_at:
            raise RuntimeError("killed")
        return {"train/loss": 0.25}

    def save(self, path: Path) -> Path:
        self.calls.add("save", path.name)
        self.saved = getattr(self, "saved", []) + [path]
        path.mkdir(parents=True, exist_ok=True)
        (path / "optimizer.pt").write_text("state")
        return path


def _recording_evaluator(summary: dict) -> tuple[list[int], Callable[[int], tuple[dict, list]]]:
    """An evaluator returning ``summary`` and no trajectories; the list records each seed it was called with."""
    seeds: list[int] = []

    def evaluator(seed):
        seeds.append(seed)
        return dict(summary), []

    return seeds, evaluator


def _loop(tmp_path, *sets: str, calls: _Calls, fail_at: int | None = None, resume: Path | None = None, **kw):
    base = [f"run.out_dir={tmp_path / 'runs'}", "run.seed=5", "train.iterations=2", "train.eval_before=false"]
    base += ["train.eval_after=false", "train.eval_every=0"]
    cfg, run_dir, store = open_run(None if resume else load_config(None, [*base, *sets]), resume)
    stages = Stages(_Supply(calls), _Rollouts(calls), _Experience(calls), _Samples(calls), _Updater(calls, fail_at))
    return MasterLoop(cfg, run_dir, store, stages, train_task_ids=["t0", "t1", "t2"], **kw), store


def test_an_iterations_seed_by_hand():
    """seed × 1,000,003 + iteration: distinct per run seed and iteration (evaluations use 10,000 + iteration)."""
    assert iteration_seed(5, 0) == 5_000_015 and iteration_seed(5, 3) == 5_000_018
    assert iteration_seed(5, -1) == 5_000_014 and iteration_seed(0, 7) == 7


def test_an_iteration_runs_the_stages_in_order_with_its_seed_and_commits_what_they_add(tmp_path):
    calls = _Calls()
    loop, store = _loop(tmp_path, calls=calls)
    summary = loop.run()
    it0 = [c for c in calls if c[1:2] in ((0,), ("iter-0000",))]
    assert [c[0] for c in it0] == [
        "tasks", "rollout", "observe", "experience", "samples", "update", "save", "experience.commit", "supply.commit"
    ]  # fmt: skip
    assert ("tasks", 0, iteration_seed(5, 0)) in calls and ("tasks", 1, iteration_seed(5, 1)) in calls
    assert ("update", 1, 2) in calls and ("samples", 1, 2) in calls and ("experience", 1, 2) in calls
    with sqlite3.connect(store.path) as db:  # each person-written task stored with the iteration that first drew it
        first = dict(db.execute("SELECT task_id, first_iteration FROM tasks WHERE task_id LIKE 't%'").fetchall())
    assert first == {"t0": 0, "t1": 0, "t2": 1}
    assert store.completed_iterations() == [0, 1] and summary["iterations"] == 2
    metrics = store.metrics()
    assert metrics[1]["train/loss"] == 0.25 and metrics[1]["experience/added"] == 1.0
    assert metrics[1]["coevolve/signals"] == 2.0 and metrics[1]["judge/calls"] == 2.0  # every stage's report kept
    assert metrics[0]["rollout/reward_mean"] == 0.5 and metrics[0]["samples/count"] == 2.0
    assert {"time/rollout_s", "time/update_s", "time/iteration_s"} <= set(metrics[0])
    stored = store.trajectories(1, "train")
    assert len(stored) == 2 and all(t.step_attributions == [StepLabel.GOOD] for t in stored)  # stage D's labels
    kept = {t.task_id: t for t in store.tasks()}
    assert {"new0", "new1"} <= set(kept)  # the supply's additions, committed with the iteration
    assert store.get_meta("experience_pool") == "as of 1"
    assert [c.iteration for c in store.checkpoints()] == [0, 1]
    assert kept["t0"].reference_solution is None  # the training side's view: no person-written reference stored
    assert json.loads(store.get_meta("train_tasks") or "[]") == ["t0", "t1", "t2"]
    assert summary["checkpoint"].endswith("iter-0001") and (Path(summary["checkpoint"]) / "optimizer.pt").exists()
    assert json.loads((Path(summary["run_dir"]) / "summary.json").read_text())["iterations"] == 2
    store.close()


def test_a_run_killed_after_its_rollouts_reuses_them_and_goes_on(tmp_path):
    calls, first_out = _Calls(), io.StringIO()
    loop, store = _loop(tmp_path, calls=calls, fail_at=1, console=Console(file=first_out, width=200))
    with pytest.raises(RuntimeError, match="killed"):
        loop.run()
    assert store.iteration_status(1) == IterationStatus.ROLLED_OUT and store.completed_iterations() == [0]
    assert "resuming" not in first_out.getvalue()  # a fresh run says nothing of resuming
    run_dir = loop.run_dir
    store.close()
    again, out = _Calls(), io.StringIO()
    loop, store = _loop(tmp_path, calls=again, resume=run_dir, console=Console(file=out, width=200))
    loop.run()
    assert [c for c in again if c[0] in ("tasks", "rollout")] == []  # iteration 1's committed rollouts are reused
    assert again[0] == ("observe", 1, 2) and ("update", 1, 2) in again and store.completed_iterations() == [0, 1]
    assert "resuming at iteration 1 (1 done)" in out.getvalue()
    store.close()


@pytest.mark.parametrize("after, periodic", [(True, [1]), (False, [1, 3])])
def test_periodic_evaluation_every_k_iterations_and_never_twice_at_the_end(tmp_path, after, periodic):
    calls, seeds = _Calls(), []

    def evaluator(seed):
        seeds.append(seed)
        time.sleep(0.06)  # a timing with a second decimal: stored to a tenth of a second
        held = [Trajectory(task_id="h", outcome_reward=1.0), Trajectory(task_id="h", outcome_reward=0.0)]
        return {"avg@2": 0.5, "best@2": 1.0}, held

    sets = ["train.iterations=4", "train.eval_every=2", f"train.eval_after={str(after).lower()}"]
    sets += ["train.eval_before=true"]
    out = io.StringIO()
    loop, store = _loop(tmp_path, *sets, calls=calls, evaluator=evaluator, console=Console(file=out, width=200))
    summary = loop.run()
    assert "held-out evaluation (before): avg@2=0.5 best@2=1.0" in out.getvalue()
    want = [iteration_seed(5, 10_000 - 1)] + [iteration_seed(5, 10_000 + it) for it in periodic]
    want += [iteration_seed(5, 10_000 + 4)] if after else []
    assert seeds == want  # before, each periodic point, after: each with its own seed
    metrics = store.metrics()
    assert [it for it in range(4) if "eval/avg@2" in metrics[it]] == periodic
    assert summary["eval_before"]["avg@2"] == 0.5 and (summary["eval_after"] is not None) == after
    before = store.evaluation("before") or {}
    assert before["iteration"] == -1 and isinstance(before["seconds"], float)  # timed, to a tenth of a second
    assert before["seconds"] == round(before["seconds"], 1) and 0.05 <= before["seconds"] < 30  # its own duration
    assert len(store.trajectories(1, "eval_periodic")) == 2
    loop._evaluate("periodic", 1)  # evaluated again (a resumed run): its trajectories replace the earlier ones
    assert len(store.trajectories(1, "eval_periodic")) == 2 and len(store.trajectories(-1, "eval_before")) == 2
    store.close()


def test_only_the_newest_checkpoints_are_kept_and_only_the_newest_keeps_its_optimizer(tmp_path):
    calls = _Calls()
    loop, store = _loop(tmp_path, "train.iterations=3", "train.keep_checkpoints=2", calls=calls)
    loop.run()
    folders = loop.run_dir / "checkpoints"
    assert sorted(p.name for p in folders.iterdir()) == ["iter-0001", "iter-0002"]
    assert not (folders / "iter-0001" / "optimizer.pt").exists() and (folders / "iter-0002" / "optimizer.pt").exists()
    store.close()


def test_the_cold_start_runs_once_checkpoints_as_iteration_minus_one_and_is_evaluated(tmp_path):
    calls, seeds = _Calls(), []

    def warmup():
        calls.add("warmup")
        return {"sft/loss": 1.5, "sft/pairs": 4.0}

    def evaluator(seed):
        seeds.append(seed)
        return {"avg@2": 0.25}, []

    out = io.StringIO()
    console = Console(file=out, width=200)
    loop, store = _loop(tmp_path, "train.eval_after=true", calls=calls, warmup=warmup, evaluator=evaluator,
                        console=console)  # fmt: skip
    summary = loop.run()
    assert calls[0] == ("warmup",) and calls[1] == ("save", "cold-start")  # before the first iteration's tasks
    warmed = loop.run_dir / "checkpoints" / "cold-start"
    assert loop.stages.updater.saved[0] == warmed
    first = store.checkpoints()[0]
    assert (first.iteration, first.path) == (-1, str(warmed)) and summary["cold_start"] == {
        "sft/loss": 1.5,
        "sft/pairs": 4.0,
    }
    assert "cold start: sft/loss=1.5 sft/pairs=4" in out.getvalue()
    assert store.evaluation("cold_start") is not None and seeds[0] == iteration_seed(5, 10_000 - 1)
    assert summary["eval_cold_start"]["avg@2"] == 0.25 and store.evaluation("before") is None
    run_dir = loop.run_dir
    store.close()
    again = _Calls()
    loop, store = _loop(tmp_path, calls=again, resume=run_dir, warmup=warmup)
    loop.run()
    assert ("warmup",) not in again  # a resumed run keeps its warm-up
    store.close()


def test_synthesis_goes_on_from_its_own_committed_rounds_and_runs_once(tmp_path, caplog):
    """run_synthesis: only tasks this run synthesized and curated count as stored rounds (a person-written task
    labelled with a curation record does not, nor a synthetic one without it); a finished synthesis is not run again,
    its tasks go to the supply."""
    import logging

    cfg, run_dir, store = open_run(load_config(None, [f"run.out_dir={tmp_path / 'runs'}"]), None)
    mine = Task(
        task_id="s1", env_name="bfcl", query="q", source=TaskSource.SYNTHETIC, metadata={"curation": {"grounded": 1.0}}
    )
    with store.transaction() as c:
        store.put_tasks(c, [mine], -1)
        store.put_tasks(
            c, [Task(task_id="p1", env_name="bfcl", query="q", metadata={"curation": {"grounded": 1.0}})], -1
        )
        store.put_tasks(c, [Task(task_id="s2", env_name="bfcl", query="q", source=TaskSource.SYNTHETIC)], -1)
    seen, received = [], []

    def synthesize(stored, funnel, on_round):
        seen.append([t.task_id for t in stored])
        made = Task(
            task_id="s3",
            env_name="bfcl",
            query="q3",
            source=TaskSource.SYNTHETIC,
            metadata={"curation": {"grounded": 1.0}},
        )
        on_round(Funnel(kept=2), [ExplorationTrace(exploration_id="e1", sandbox={})], [made])
        return [*stored, made], Funnel(kept=2)

    stage = SynthesisStage(synthesize=synthesize, receive=received.extend)
    with caplog.at_level(logging.INFO, logger="evolvekit.orchestrator.loop"):
        first = run_synthesis(store, stage)
    assert seen == [["s1"]] and [t.task_id for t in first] == ["s1", "s3"]
    said = [r.getMessage() for r in caplog.records]
    assert said[-1].startswith("self-questioning funnel: {") and "'kept': 2" in said[-1]  # the final funnel, logged
    resumed = [r.getMessage() for r in caplog.records if "resuming" in r.getMessage()]
    assert resumed[0].startswith("resuming self-questioning with 1 stored synthetic tasks (funnel so far: {")
    assert json.loads(store.get_meta(SYNTHESIS_DONE) or "{}")["kept"] == 2
    # a round's explorations and kept tasks are stored as self-questioning's (iteration -1), not an iteration's
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT first_iteration FROM tasks WHERE task_id = 's3'").fetchall() == [(-1,)]
        assert db.execute("SELECT iteration FROM explorations WHERE exploration_id = 'e1'").fetchall() == [(-1,)]
    again = run_synthesis(store, stage)  # finished: its tasks are reused, nothing is synthesized again
    assert seen == [["s1"]] and sorted(t.task_id for t in again) == ["s1", "s3"]
    assert [t.task_id for t in received] == ["s1", "s3", *[t.task_id for t in again]]
    store.close()


@pytest.mark.parametrize("oracle", [False, True])
def test_the_summary_says_what_the_run_read_and_names_each_output(tmp_path, oracle):
    """summary.json (the dict ``run`` returns, written as it is): gold 'oracle' only under run.oracle, where the
    worked examples come from, and the paths of every output, each of which exists."""
    from evolvekit.config import examples_source

    calls = _Calls()
    evaluator = lambda seed: ({"avg@2": 0.5}, [])  # noqa: E731
    sets = ["train.iterations=1", "train.eval_before=true", "train.eval_after=true"]
    sets += [f"run.oracle={str(oracle).lower()}"]
    loop, store = _loop(tmp_path, *sets, calls=calls, evaluator=evaluator)
    summary = loop.run()
    assert summary["gold"] == ("oracle" if oracle else "none")
    assert summary["examples"] == examples_source(loop.cfg) and summary["examples"]
    assert summary["store"] == str(store.path) and summary["iterations"] == 1
    assert Path(summary["metrics"]) == loop.run_dir / "metrics.jsonl" and Path(summary["metrics"]).is_file()
    assert Path(summary["tensorboard"]) == loop.run_dir / "tensorboard" and any(Path(summary["tensorboard"]).iterdir())
    assert Path(summary["learning_curve"]).is_file() and summary["learning_curve"].endswith(".png")
    assert summary["eval_before"]["avg@2"] == summary["eval_after"]["avg@2"] == 0.5
    assert "cold_start" not in summary and "eval_cold_start" not in summary  # no warm-up, no such keys
    written = (loop.run_dir / "summary.json").read_text()
    assert json.loads(written) == summary and written.startswith('{\n  "run_dir": ')  # for a person: indented
    store.close()


def test_the_loop_shapes_rewards_once_and_reports_the_format_and_outcome_parts(tmp_path, caplog):
    """With a format weight the loop shapes each reward from its record (R = w_o·R_out + w_f·R_format) and reports
    both parts, as means over the iteration's trajectories; each iteration is said on the console and in the log."""
    import logging

    from evolvekit.train.rewards import FORMAT_REWARDS

    calls, out = _Calls(), io.StringIO()
    sets = ["train.iterations=1", "reward.w_outcome=0.5", "reward.w_format=0.5"]
    loop, store = _loop(tmp_path, *sets, calls=calls, console=Console(file=out, width=200))
    loop.stages.rollouts = _ExactRollouts(calls)  # executed calls: a format reward above 0
    t0 = time.perf_counter()
    with caplog.at_level(logging.INFO, logger="evolvekit.orchestrator.loop"):
        loop.run()
    took = time.perf_counter() - t0
    metrics = store.metrics()[0]
    for part in ("rollout", "experience", "samples", "update", "iteration"):  # each stage's own duration
        assert 0 <= metrics[f"time/{part}_s"] <= took
    stored = store.trajectories(0, "train")
    fmt = [FORMAT_REWARDS[loop.cfg.reward.format](t) for t in stored]
    assert metrics["reward/outcome"] == 0.5  # outcomes 0 and 1
    assert metrics["reward/format"] == pytest.approx(sum(fmt) / 2) and sum(fmt) > 0
    assert [t.rewards.format for t in stored] == pytest.approx(fmt)
    assert metrics["rollout/reward_mean"] == pytest.approx(0.5 * 0.5 + 0.5 * sum(fmt) / 2)  # shaped once
    said = out.getvalue()
    assert f"iteration 1/1: reward {metrics['rollout/reward_mean']:.3f} success 0.500 parse-errors 0.00" in said
    assert "loss +0.2500" in said
    logged = [r.getMessage() for r in caplog.records if "update step" in r.getMessage()]
    assert logged and logged[0].startswith("iteration 1/1: update step on 2 samples: loss +0.2500 in ")
    import re

    step_s, samples_s = map(float, re.findall(r"([0-9.]+)s", logged[0]))  # the step's own time, then the samples'
    assert 0 <= step_s <= took and samples_s == round(metrics["time/samples_s"], 1)
    store.close()


class _ExactRollouts(_Rollouts):
    """Each episode executes the reference's own call (add(a=1, b=2)) without error; outcomes 0 and 1."""

    def rollout(self, ctx, tasks):
        from evolvekit.types import CallOutcome

        call = ToolCall(name="add", arguments={"a": 1, "b": 2})
        step = Step(index=0, action_text="x", tool_calls=[call], calls=[CallOutcome(name="add", ok=True)])
        return [
            Trajectory(task_id=t.task_id, group_id="g", outcome_reward=float(i % 2), steps=[step])
            for i, t in enumerate(tasks)
        ]


@pytest.mark.parametrize("oracle, boundary", [(False, None), (True, None), (False, True)])
def test_partial_credit_reads_a_person_written_reference_only_under_oracle(tmp_path, oracle, boundary):
    """reward.w_partial: the loop hands shaping the references the boundary lets through: a person-written task's
    only under run.oracle (else its partial credit is 0 however exactly the episode followed it). A boundary handed
    to the loop is the one it asks."""
    from evolvekit.boundary import InformationBoundary

    calls = _Calls()
    sets = ["train.iterations=1", "reward.w_partial=0.5", f"run.oracle={str(oracle).lower()}"]
    given = {} if boundary is None else {"boundary": InformationBoundary(oracle=boundary)}
    loop, store = _loop(tmp_path, *sets, calls=calls, **given)
    oracle = oracle or bool(boundary)
    loop.stages.rollouts = _ExactRollouts(calls)
    loop.run()
    stored = store.trajectories(0, "train")
    assert [t.metadata["partial_credit"] for t in stored] == ([1.0, 1.0] if oracle else [0.0, 0.0])
    store.close()


@pytest.mark.parametrize("keep, kept", [(1, ["iter-0002"]), (3, ["iter-0000", "iter-0001", "iter-0002"])])
def test_a_checkpoint_budget_keeps_that_many_newest_folders(tmp_path, keep, kept):
    calls = _Calls()
    loop, store = _loop(tmp_path, "train.iterations=3", f"train.keep_checkpoints={keep}", calls=calls)
    loop.run()
    folders = loop.run_dir / "checkpoints"
    assert sorted(p.name for p in folders.iterdir()) == kept
    assert [(folders / k / "optimizer.pt").exists() for k in kept] == [k == "iter-0002" for k in kept]
    store.close()


def test_held_out_trajectories_are_stored_without_the_reference_distances(tmp_path):
    """Held-out tasks are person-written: their stored evaluation trajectories keep whether a step changed the state,
    never its distances to the reference end state (boundary.trajectories_view), unless run.oracle."""
    from evolvekit.types import StepGrounding

    grounded = StepGrounding(state_changed=True, distance_before=2, distance_after=1)
    step = Step(index=0, action_text="x", tool_calls=[ToolCall(name="add")], grounding=grounded)

    def evaluator(seed):
        return {"avg@1": 1.0}, [Trajectory(task_id="held", outcome_reward=1.0, steps=[step])]

    calls = _Calls()
    loop, store = _loop(tmp_path, "train.iterations=1", "train.eval_before=true", calls=calls, evaluator=evaluator)
    loop.run()
    (held,) = store.trajectories(-1, "eval_before")
    g = held.steps[0].grounding
    assert g is not None and g.state_changed is True and g.distance_before is None and g.distance_after is None
    store.close()


def test_a_damaged_committed_rollout_is_rolled_out_again_on_resume(tmp_path, caplog):
    """The fast twin of test_run_loop's damaged-rollout resume: a half-finished iteration reuses its committed
    rollouts only when every row reads back; one damaged row and the iteration rolls out again, with a warning."""
    import logging

    calls = _Calls()
    loop, store = _loop(tmp_path, calls=calls, fail_at=1)
    with pytest.raises(RuntimeError, match="killed"):
        loop.run()
    run_dir = loop.run_dir
    first = {t.trajectory_id for t in store.trajectories(1, "train")}
    store.close()
    with sqlite3.connect(run_dir / "run.sqlite") as raw:
        raw.execute(
            "UPDATE trajectories SET json = '{\"cut' WHERE rowid = (SELECT MAX(rowid) FROM trajectories WHERE "
            "iteration = 1)"
        )
    again = _Calls()
    loop, store = _loop(tmp_path, calls=again, resume=run_dir)
    with caplog.at_level(logging.INFO, logger="evolvekit.orchestrator.loop"):
        loop.run()
    said = [r.getMessage() for r in caplog.records]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "iteration 1: 1 damaged trajectory rows among its committed rollouts; rolling out again" in warned
    assert not any("reusing" in m for m in said)
    assert again[0] == ("tasks", 1, iteration_seed(5, 1)) and again[1][0] == "rollout"
    fresh = {t.trajectory_id for t in store.trajectories(1, "train")}
    assert len(fresh) == 2 and not fresh & first and store.completed_iterations() == [0, 1]
    store.close()


def test_reused_rollouts_are_said_in_the_log(tmp_path, caplog):
    import logging

    calls = _Calls()
    loop, store = _loop(tmp_path, calls=calls, fail_at=1)
    with pytest.raises(RuntimeError):
        loop.run()
    run_dir = loop.run_dir
    store.close()
    loop, store = _loop(tmp_path, calls=_Calls(), resume=run_dir)
    with caplog.at_level(logging.INFO, logger="evolvekit.orchestrator.loop"):
        loop.run()
    assert "iteration 1: reusing 2 committed rollouts" in [r.getMessage() for r in caplog.records]
    store.close()


def test_prepare_runs_first_then_synthesis_then_the_evaluation_before(tmp_path):
    """The run's own worked examples are made (``prepare``) before anything else; the synthesis stage, when there is
    one, runs before the evaluation before training, and its tasks go to the supply."""
    order: list[str] = []

    def synthesize(stored, funnel, on_round):
        order.append("synthesize")
        made = Task(task_id="s1", env_name="bfcl", query="q", source=TaskSource.SYNTHETIC, metadata={"curation": {}})
        return [made], Funnel(kept=1)

    def evaluator(seed):
        order.append("evaluate")
        return {"avg@1": 0.0}, []

    received: list[Task] = []
    calls = _Calls()
    sets = ["train.iterations=1", "train.eval_before=true"]
    loop, store = _loop(tmp_path, *sets, calls=calls, evaluator=evaluator, prepare=lambda: order.append("prepare"))
    loop.stages.synthesis = SynthesisStage(synthesize=synthesize, receive=received.extend)
    loop.run()
    assert order == ["prepare", "synthesize", "evaluate"] and [t.task_id for t in received] == ["s1"]
    assert store.get_meta(SYNTHESIS_DONE) is not None
    store.close()


def test_evaluations_run_only_when_asked_and_once_per_run(tmp_path):
    """eval_before / eval_after off: no such evaluation even with an evaluator; a resumed finished run evaluates
    neither again."""
    seeds, evaluator = _recording_evaluator({"avg@1": 0.5})

    loop, store = _loop(tmp_path, "train.iterations=1", "train.eval_after=true", calls=_Calls(), evaluator=evaluator)
    summary = loop.run()
    assert summary["eval_before"] is None and store.evaluation("before") is None
    assert seeds == [iteration_seed(5, 10_000 + 1)]  # the evaluation after training only
    run_dir = loop.run_dir
    store.close()
    loop, store = _loop(tmp_path, calls=_Calls(), resume=run_dir, evaluator=evaluator)
    loop.cfg = loop.cfg.model_copy(update={"train": loop.cfg.train.model_copy(update={"eval_before": True})})
    loop.run()
    assert seeds == [iteration_seed(5, 10_000 + 1), iteration_seed(5, 10_000 - 1)]  # before: asked now
    store.close()


def test_report_to_reaches_the_metrics_sink_with_the_runs_config(tmp_path):
    """train.report_to: an MLflow-only run writes no TensorBoard events and logs the run's config as parameters
    (the trackers get ``cfg.model_dump``)."""
    pytest.importorskip("mlflow")
    loop, store = _loop(tmp_path, "train.iterations=1", "train.report_to=[mlflow]", calls=_Calls())
    loop.run()
    assert not (loop.run_dir / "tensorboard").exists()
    params = list((loop.run_dir / "mlruns").glob("*/*/params/run.seed"))
    assert [p.read_text() for p in params] == ["5"]
    store.close()


def test_an_iteration_run_again_replaces_its_tensorboard_points(tmp_path):
    """A resumed run that goes back to an iteration already written (a damaged newest checkpoint) purges the event
    files' points from that iteration on (``purge_step``): each scalar has one point per iteration."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loop, store = _loop(tmp_path, calls=_Calls())
    loop.run()
    run_dir = loop.run_dir
    with store.transaction() as c:
        c.execute("DELETE FROM iterations WHERE iteration = 1")  # as the damaged-checkpoint fallback does
    store.close()
    loop, store = _loop(tmp_path, calls=_Calls(), resume=run_dir)
    loop.run()
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [0, 1]
    store.close()


def test_a_cold_start_is_not_evaluated_when_no_evaluation_is_asked(tmp_path):
    seeds, evaluator = _recording_evaluator({"avg@1": 0.0})

    loop, store = _loop(
        tmp_path, "train.iterations=1", calls=_Calls(), evaluator=evaluator, warmup=lambda: {"sft/loss": 1.0}
    )
    loop.run()
    assert seeds == [] and store.evaluation("cold_start") is None and store.get_meta("cold_start") is not None
    store.close()


def test_a_run_killed_in_its_first_iteration_keeps_its_warm_up_and_its_evaluation_before(tmp_path):
    """Killed in iteration 0, after the cold start and the evaluation before training: the resumed run (again at
    iteration 0) neither warms up again nor evaluates before training again."""
    seeds, evaluator = _recording_evaluator({"avg@1": 0.0})
    warmups: list[int] = []

    def warmup():
        warmups.append(1)
        return {"sft/loss": 1.0}

    sets = ["train.iterations=1", "train.eval_before=true"]
    loop, store = _loop(tmp_path, *sets, calls=_Calls(), fail_at=0, evaluator=evaluator, warmup=warmup)
    with pytest.raises(RuntimeError, match="killed"):
        loop.run()
    assert len(warmups) == 1 and store.evaluation("before") is not None
    run_dir, evaluated = loop.run_dir, len(seeds)
    store.close()
    loop, store = _loop(tmp_path, calls=_Calls(), resume=run_dir, evaluator=evaluator, warmup=warmup)
    loop.run()
    assert len(warmups) == 1 and len(seeds) == evaluated and store.completed_iterations() == [0]
    store.close()


def test_a_run_of_no_iterations_evaluates_and_names_no_checkpoint(tmp_path):
    """train.iterations 0 (an evaluation of the starting policy): no iteration, no checkpoint, the summary says so."""
    loop, store = _loop(tmp_path, "train.iterations=0", calls=_Calls())
    summary = loop.run()
    assert summary["iterations"] == 0 and summary["checkpoint"] is None and store.checkpoints() == []
    store.close()


class _JudgedRollouts(_Rollouts):
    """Synthesized tasks' episodes: each with its state check 1.0 and a judge score (1.0, then 0.0)."""

    def rollout(self, ctx, tasks):
        from evolvekit.types import RewardParts

        self.calls.add("ctx", ctx.run_dir, ctx.store)
        step = Step(index=0, action_text="x", tool_calls=[ToolCall(name="add")])
        return [
            Trajectory(
                task_id=t.task_id,
                group_id="g",
                outcome_reward=1.0,
                steps=[step],
                rewards=RewardParts(env=1.0, state_score=1.0, judge_score=1.0 - i),
            )
            for i, t in enumerate(tasks)
        ]


@pytest.mark.parametrize("mode, want", [("state", [1.0, 1.0]), ("mix", [1.0, 0.75]), ("judge", [1.0, 0.0])])
def test_a_synthesized_tasks_outcome_is_the_configured_judge_mix(tmp_path, mode, want):
    """questioning.reward and questioning.judge_weight reach the loop's one reward computation (§3.4): state, the
    judge, or w·judge + (1 − w)·state with w = 0.25. The stages get the iteration's run folder and store."""
    calls = _Calls()
    sets = ["train.iterations=1", f"questioning.reward={mode}", "questioning.judge_weight=0.25"]
    sets += ["reward.success_threshold=0.8"]
    loop, store = _loop(tmp_path, *sets, calls=calls)
    loop.stages.rollouts = _JudgedRollouts(calls)
    loop.run()
    assert [t.outcome_reward for t in store.trajectories(0, "train")] == want
    assert store.metrics()[0]["rollout/success_rate"] == sum(r >= 0.8 for r in want) / 2  # reward.success_threshold
    assert ("ctx", loop.run_dir, store) in calls
    store.close()


class _SilentUpdater(_Updater):
    def update(self, ctx, samples):
        return {}  # an update stage that reports no loss


def test_an_update_without_a_loss_is_said_as_zero(tmp_path, caplog):
    import logging

    out = io.StringIO()
    loop, store = _loop(tmp_path, "train.iterations=1", calls=_Calls(), console=Console(file=out, width=200))
    loop.stages.updater = _SilentUpdater(_Calls())
    with caplog.at_level(logging.INFO, logger="evolvekit.orchestrator.loop"):
        loop.run()
    logged = [r.getMessage() for r in caplog.records if "update step" in r.getMessage()]
    assert logged[0].startswith("iteration 1/1: update step on 2 samples: loss +0.0000 in ")
    assert "loss +0.0000 (" in out.getvalue()
    store.close()


def test_periodic_evaluation_counts_iterations_from_one(tmp_path):
    """eval_every 3 over 4 iterations, no evaluation after: after the third update (iteration 2) and the last."""
    seeds, evaluator = _recording_evaluator({"avg@1": 0.0})

    sets = ["train.iterations=4", "train.eval_every=3"]
    loop, store = _loop(tmp_path, *sets, calls=_Calls(), evaluator=evaluator)
    loop.run()
    assert seeds == [iteration_seed(5, 10_000 + 2), iteration_seed(5, 10_000 + 3)]
    store.close()


class _ParseErrorRollouts(_Rollouts):
    """One episode whose only step did not parse, one that did."""

    def rollout(self, ctx, tasks):
        bad = Step(index=0, action_text="<tool_call>{", parse_error="unterminated")
        good = Step(index=0, action_text="x", tool_calls=[ToolCall(name="add")])
        return [
            Trajectory(task_id=t.task_id, group_id="g", outcome_reward=0.0, steps=[bad if i == 0 else good])
            for i, t in enumerate(tasks)
        ]


class _NoRollouts(_Rollouts):
    def rollout(self, ctx, tasks):
        return []  # a stage that made no episode: no rollout metrics at all


@pytest.mark.parametrize("rollouts, line", [(_ParseErrorRollouts, "reward 0.000 success 0.000 parse-errors 0.50"),
                                            (_NoRollouts, "reward 0.000 success 0.000 parse-errors 0.00")])  # fmt: skip
def test_the_iteration_line_says_reward_success_and_parse_errors(tmp_path, rollouts, line):
    out = io.StringIO()
    loop, store = _loop(tmp_path, "train.iterations=1", calls=_Calls(), console=Console(file=out, width=200))
    loop.stages.rollouts = rollouts(_Calls())
    loop.run()
    assert f"iteration 1/1: {line} loss +0.2500 (" in out.getvalue()
    store.close()


def test_the_learning_curve_is_drawn_with_the_evaluations_before_and_after(tmp_path, monkeypatch):
    """Each iteration redraws the curve with the evaluation before training; the run's end with both."""
    from evolvekit.orchestrator.metrics import MetricsSink

    drawn: list[list[str]] = []
    plot = MetricsSink.plot

    def recording(self, all_metrics, evaluations):
        drawn.append(sorted(evaluations))
        return plot(self, all_metrics, evaluations)

    monkeypatch.setattr(MetricsSink, "plot", recording)
    sets = ["train.eval_before=true", "train.eval_after=true"]
    loop, store = _loop(tmp_path, *sets, calls=_Calls(), evaluator=lambda seed: ({"avg@1": 0.5}, []))
    loop.run()
    assert drawn == [["before"], ["before"], ["after", "before"]]
    store.close()


def test_the_loops_own_console_writes_to_stderr(tmp_path):
    """Progress goes to stderr, so that a command's stdout carries only its result."""
    loop, store = _loop(tmp_path, calls=_Calls())
    assert loop.console.stderr is True
    store.close()
