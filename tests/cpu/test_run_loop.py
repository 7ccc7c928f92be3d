"""CleanRL-style smoke tests of the master loop on a tiny random model (SmolLM2 tokenizer), plus crash/resume.

- two iterations change the parameters and write metrics (JSONL, TensorBoard, PNG) and the store;
- a crash after the rollouts of an iteration were committed resumes by reusing those rollouts;
- a real ``evolvekit run`` killed with SIGKILL mid-iteration resumes with nothing lost or duplicated.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from evolvekit.config import ModelsConfig, load_config
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.orchestrator.build import build_loop
from evolvekit.orchestrator.run_dir import open_run
from evolvekit.store.sqlite import IterationStatus, RunStore

HELPERS = tuple(r for r in ModelsConfig.model_fields if r != "policy")  # every helper role

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(autouse=True)
def _plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(PLUGINS)


def _config(tiny, out: Path, iterations=2, **train):
    data = {
        "run": {"name": "smoke", "out_dir": str(out), "seed": 1},
        "env": {"name": "coin", "plugins": ["coin_env"]},
        "rollout": {"max_steps": 1, "group_size": 4, "concurrency": 8},
        "train": {
            "iterations": iterations,
            "tasks_per_iteration": 2,
            "learning_rate": 1e-3,
            "kl_beta": 0.001,
            "eval_tasks": 2,
            "eval_k": 2,
            "autocast": "off",
            **train,
        },
        # every role tiny: the explorer that makes the run's own worked examples too (issue 97)
        "models": {**{r: {"model": str(tiny)} for r in HELPERS}, "policy": {"model": str(tiny), "max_new_tokens": 9}},
    }
    path = out / "cfg.yaml"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _weights(path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


@pytest.mark.slow
def test_two_iterations_train_and_write_everything(tiny, tmp_path, caplog):
    cfg, run_dir, store = open_run(load_config(_config(tiny, tmp_path)), None)
    with caplog.at_level("INFO", logger="evolvekit.orchestrator.loop"):
        summary = build_loop(cfg, run_dir, store, show_progress=False).run()
    updates = [r.getMessage() for r in caplog.records if "update step on" in r.getMessage()]
    assert len(updates) == 2 and updates[0].startswith("iteration 1/2: update step on 8 samples"), updates
    assert store.completed_iterations() == [0, 1]
    # parameters changed
    before, after = _weights(tiny), _weights(store.latest_checkpoint().path)
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after)
    # metrics: JSONL, TensorBoard events, PNG, store
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["iteration"] for x in lines] == [0, 1]
    wanted = {"rollout/reward_mean", "train/loss", "train/tokens_per_s", "samples/count", "time/samples_s"}
    assert wanted <= set(lines[0])
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
    assert summary["eval_before"]["k"] == 2 and summary["eval_after"] is not None
    assert store.count("trajectories") == 2 * 2 * 4 + 2 * 2 * 2  # train + eval before/after
    assert store.count("steps") == store.count("trajectories")
    # only the newest checkpoint keeps its optimizer state
    ckpts = store.checkpoints()
    assert (Path(ckpts[-1].path) / "optimizer.pt").is_file()
    assert not (Path(ckpts[0].path) / "optimizer.pt").exists()
    store.close()


class _CrashOnce:
    def __init__(self, inner, at):
        self.inner, self.at = inner, at

    def update(self, ctx, samples):
        if ctx.iteration == self.at:
            raise RuntimeError("simulated crash during the update")
        return self.inner.update(ctx, samples)

    def save(self, path):
        return self.inner.save(path)


@pytest.mark.slow
def test_resume_reuses_committed_rollouts(tiny, tmp_path):
    cfg, run_dir, store = open_run(
        load_config(_config(tiny, tmp_path, iterations=3, eval_before=False, eval_after=False)), None
    )
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    loop.stages.updater = _CrashOnce(loop.stages.updater, at=1)
    with pytest.raises(RuntimeError, match="simulated crash"):
        loop.run()
    assert store.completed_iterations() == [0]
    assert store.iteration_status(1) == IterationStatus.ROLLED_OUT
    committed = [t.trajectory_id for t in store.trajectories(1)]
    store.close()

    cfg2, run_dir2, store2 = open_run(None, run_dir)
    build_loop(cfg2, run_dir2, store2, show_progress=False).run()
    assert store2.completed_iterations() == [0, 1, 2]
    assert [t.trajectory_id for t in store2.trajectories(1)] == committed  # reused, not re-sampled
    assert store2.count("trajectories") == 3 * 2 * 4
    store2.close()


def test_open_run_rejects_a_non_run_directory(tmp_path):
    from evolvekit.errors import ConfigError

    with pytest.raises(ConfigError, match="not a run directory"):
        open_run(None, tmp_path)


def _cli(*args, env=None):
    return [sys.executable, "-m", "evolvekit.cli.main", *args]


@pytest.mark.slow
def test_kill_9_mid_iteration_then_resume(tiny, tmp_path):
    cfg_path = _config(tiny, tmp_path, iterations=4, eval_before=False, eval_after=False)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([PLUGINS, os.environ.get("PYTHONPATH", "")]),
        "COIN_ENV_SLEEP": "0.4",
    }
    proc = subprocess.Popen(
        _cli("run", str(cfg_path), "--no-progress"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        run_dir = None
        while time.time() < deadline:
            dirs = [d for d in tmp_path.iterdir() if d.is_dir() and (d / "run.sqlite").is_file()]
            if dirs:
                run_dir = dirs[0]
                con = sqlite3.connect(run_dir / "run.sqlite")
                try:
                    done = con.execute("SELECT COUNT(*) FROM iterations WHERE status='done'").fetchone()[0]
                except sqlite3.OperationalError:
                    done = 0
                con.close()
                if done >= 1:
                    break
            if proc.poll() is not None:
                pytest.fail("run ended before it could be killed:\n" + proc.stdout.read().decode()[-2000:])
            time.sleep(0.2)
        else:
            pytest.fail("run made no progress")
        time.sleep(0.5)  # inside the next iteration's rollouts (each step sleeps 0.4 s)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    store = RunStore(run_dir / "run.sqlite")
    done_before = store.completed_iterations()
    assert 1 <= len(done_before) < 4
    store.close()

    env["COIN_ENV_SLEEP"] = "0"
    res = subprocess.run(
        _cli("run", "--resume", str(run_dir), "--no-progress", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    store = RunStore(run_dir / "run.sqlite")
    assert store.completed_iterations() == [0, 1, 2, 3]
    con = sqlite3.connect(run_dir / "run.sqlite")
    per_iter = dict(con.execute("SELECT iteration, COUNT(*) FROM trajectories WHERE phase='train' GROUP BY iteration"))
    assert per_iter == {0: 8, 1: 8, 2: 8, 3: 8}  # nothing lost, nothing duplicated
    assert con.execute("SELECT COUNT(DISTINCT iteration) FROM checkpoints").fetchone()[0] == 4
    con.close()
    lines = [json.loads(x)["iteration"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines == [0, 1, 2, 3]
    store.close()


def test_training_refuses_a_served_policy_before_making_a_run_folder(tmp_path):
    from evolvekit.errors import ConfigError

    cfg = load_config(None, ["models.policy.backend=openai", f"run.out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="backend: local"):
        open_run(cfg, None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_damaged_checkpoint_resumes_from_the_previous_one(tiny, tmp_path):
    """A truncated newest checkpoint is detected by its checksums; the run falls back to the one before it and
    re-runs the iteration after it, ending with every iteration done and the same number of rollouts."""
    cfg, run_dir, store = open_run(
        load_config(_config(tiny, tmp_path, iterations=3, eval_before=False, eval_after=False)), None
    )
    build_loop(cfg, run_dir, store, show_progress=False).run()
    ckpts = store.checkpoints()
    assert [c.iteration for c in ckpts] == [0, 1, 2]  # the folder of 0 was pruned (keep_checkpoints=2)
    weights = Path(ckpts[-1].path) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    # the run "finished", but its last iteration's weights are gone: forget it and run it again
    with store.transaction() as c:
        c.execute("DELETE FROM iterations WHERE iteration = 2")
    store.close()

    lines = []

    class _Console:
        def print(self, text, *a, **k):
            lines.append(str(text))

    cfg2, run_dir2, store2 = open_run(None, run_dir)
    loop = build_loop(cfg2, run_dir2, store2, console=_Console(), show_progress=False)
    assert store2.completed_iterations() == [0, 1]
    loop.run()
    damaged = [x for x in lines if "damaged" in x]
    assert len(damaged) == 1 and "model.safetensors does not match its checksum" in damaged[0]
    assert "resuming from iter-0001" in damaged[0]
    assert store2.completed_iterations() == [0, 1, 2]
    assert store2.count("trajectories") == 3 * 2 * 4
    from evolvekit.train.checkpoint import checkpoint_problem

    assert checkpoint_problem(Path(store2.latest_checkpoint().path)) is None
    store2.close()


@pytest.mark.slow
def test_resume_cli_names_a_damaged_checkpoint_in_one_line(tiny, tmp_path):
    cfg, run_dir, store = open_run(
        load_config(_config(tiny, tmp_path, iterations=1, eval_before=False, eval_after=False)), None
    )
    build_loop(cfg, run_dir, store, show_progress=False).run()
    (Path(store.latest_checkpoint().path) / "model.safetensors").write_bytes(b"\0" * 100)
    with store.transaction() as c:
        c.execute("DELETE FROM iterations WHERE iteration = 0")
    store.close()
    env = {**os.environ, "PYTHONPATH": PLUGINS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        _cli("run", "--resume", str(run_dir), "--no-progress"), capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SafetensorError" not in out.stderr + out.stdout
    assert "resuming from the initial policy" in out.stderr + out.stdout


class _AlwaysGood:
    name = "always-good"

    def chat(self, conversations, params):
        from evolvekit.llm.base import Completion

        return [
            [Completion(text="Step 0 Analysis: ok\nStep 0 Judgment: GOOD", token_ids=[1], prompt_token_ids=[1])]
            for _ in conversations
        ]


def test_attribution_stage_logs_metrics_and_stores_labels(tiny, tmp_path):
    cfg = load_config(
        _config(tiny, tmp_path, iterations=1, eval_before=False, eval_after=False),
        ["attributing.enabled=true", "attributing.source=llm", "attributing.constrained=off"],
    )
    cfg, run_dir, store = open_run(cfg, None)
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    loop.stages.samples.attributor.llm = _AlwaysGood()  # the attributor role is a test double here
    loop.run()
    m = store.metrics()[0]
    assert m["attribution/good_ratio"] == 1.0 and m["attribution/parse_failure_rate"] == 0.0
    assert m["attribution/calls"] == 8 and m["attribution/alpha"] == pytest.approx(0.1)
    # every step GOOD: Eq. 18's population is constant, so every group's attribution channel contributed nothing
    assert m["attribution/constant_channel_groups"] == m["samples/groups"] > 0
    con = sqlite3.connect(run_dir / "run.sqlite")
    assert {r[0] for r in con.execute("SELECT label FROM steps")} == {"GOOD"}
    con.close()
    assert all(t.step_attributions == ["GOOD"] and t.attribution_source == "llm" for t in store.trajectories(0))
    store.close()


def test_embedded_attributor_defaults_to_grounded_credit(tiny, tmp_path):
    """attributing.source: auto with an in-process attributor is grounded: no attributor model is built, labels come
    from execution, and the run records which source each helper role used. The coin tasks have no reference: in a
    group without a passing episode the generic fallback (errors BAD, the final answer BAD by the environment's
    check, the rest NEUTRAL); in a group with one, the
    group's own shortest success is the reference (attributing/grounded.py: self_reference), so a passing episode's
    answer is GOOD and a failing one's BAD."""
    cfg = load_config(
        _config(tiny, tmp_path, iterations=1, eval_before=False, eval_after=False), ["attributing.enabled=true"]
    )
    cfg, run_dir, store = open_run(cfg, None)
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    assert loop.stages.samples.attributor is None
    loop.run()
    trajs = store.trajectories(0)
    assert trajs and all(t.attribution_source == "grounded" and t.step_attributions is not None for t in trajs)
    threshold = cfg.reward.success_threshold
    for t in trajs:
        group_passed = any(o.checked_outcome >= threshold for o in trajs if o.task_id == t.task_id)
        passed = t.checked_outcome >= threshold
        for step, label in zip(t.steps, t.step_attributions):
            bad = step.parse_error is not None and not step.tool_calls or any(not c.ok for c in step.calls)
            if bad:
                assert label == "BAD"
            elif not group_passed:  # the final answer failed the check; nothing else has a verdict
                final_answer = step is t.steps[-1] and not step.tool_calls
                assert label == ("BAD" if final_answer else "NEUTRAL")
            elif not step.tool_calls:  # the answer, against the group's own success
                assert label == ("GOOD" if passed else "BAD")
    assert "attribution/good_ratio" in store.metrics()[0]
    assert json.loads(store.get_meta("helper_sources"))["attributor"] == "grounded"
    store.close()


@pytest.mark.slow
def test_experience_as_a_tool_replaces_injection_and_reaches_held_out_evaluation(tiny, tmp_path):
    """Issue 53 (1): with navigating.as_tool (EvolveR's retrieval as an action), training rollouts offered
    search_experience but held-out evaluation did not, and prompt injection and the boost still ran on η of the
    rollouts. Now every rollout, held-out ones included, is offered the tool, none is injected, and no sample is
    boosted."""
    from evolvekit.llm.local import LocalLLM

    sets = ["navigating.enabled=true", "navigating.as_tool=true", "navigating.n_pc=0", "navigating.rerank=false"]
    sets += ["navigating.rewrite=false", f"models.summarizer.model={tiny}", "navigating.extraction=grounded"]
    seeds = Path(__file__).resolve().parents[2] / "configs" / "evidence" / "data" / "experiences_arith_examples.jsonl"
    sets += [f"navigating.seed_file={seeds}"]  # a pool that injection would draw from
    cfg, run_dir, store = open_run(load_config(_config(tiny, tmp_path, iterations=1, eval_after=False), sets), None)
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    assert loop.stages.updater.trainer.eps_high_boost is None
    loop.run()
    tok = LocalLLM(str(tiny), device="cpu").tokenizer
    for phase in ("eval_before", "train"):
        trajs = store.trajectories(None, phase)
        assert trajs, phase
        for t in trajs:
            assert "search_experience" in tok.decode(t.steps[0].prompt_token_ids), phase
            assert not t.flags.experience_guided and not t.experience_used or phase == "train"
    assert not any(t.flags.experience_guided for t in store.trajectories(None, "train"))  # no injection
    assert store.metrics()[0]["navigating/guided_rollouts"] == 0.0
    store.close()


def test_the_loop_shapes_rewards_with_the_reasoning_templates_weight(tiny, tmp_path):
    """Issue 53: passing w_reasoning=0 in the loop passed every template test. A run with the reasoning template
    stores each training episode's reasoning reward and adds w_r times it to the outcome."""
    sets = ["rollout.template=reasoning"]
    cfg, run_dir, store = open_run(
        load_config(_config(tiny, tmp_path, iterations=1, eval_before=False, eval_after=False), sets), None
    )
    assert cfg.reward.w_reasoning == 0.1
    build_loop(cfg, run_dir, store, show_progress=False).run()
    trajs = [t for t in store.trajectories(0) if not t.flags.failed]
    assert trajs and all(t.rewards.reasoning is not None for t in trajs)
    for t in trajs:
        assert abs(t.outcome_reward - (t.rewards.outcome + 0.1 * t.rewards.reasoning)) < 1e-9
    store.close()


def test_the_cold_start_pool_samples_the_runs_training_set(tiny, tmp_path):
    """Issue 53: building Eq. 13's cold start without the training set (the old iteration-0 bug) passed every
    navigating and run-loop test. The stage the run builds holds p_train, and its n_pc cold-start tasks come from
    all of it, not from the first iteration's tasks."""
    sets = ["navigating.enabled=true", "navigating.n_pc=4", "navigating.rerank=false", "navigating.rewrite=false"]
    sets += [f"models.summarizer.model={tiny}", "navigating.extraction=grounded"]
    cfg, run_dir, store = open_run(load_config(_config(tiny, tmp_path, iterations=1), sets), None)
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    stage = loop.stages.rollouts
    train = {t.task_id for t in loop.stages.supply.training_set()}
    assert len(train) == 6 and {t.task_id for t in stage.training_set()} == train  # read when the cold start runs
    first = [t for t in stage.training_set()][:2]
    picks = {t.task_id for seed in range(8) for t in stage.cold_start_tasks(seed=seed, fallback=first)}
    assert picks <= train and not picks <= {t.task_id for t in first}
    store.close()


@pytest.mark.slow
def test_a_resumed_iteration_with_a_damaged_committed_rollout_rolls_out_again(tiny, tmp_path, caplog):
    """Issue 52 (2): an iteration killed after its rollouts were committed resumes by reusing them, unless one row is
    damaged: then it rolls out again (a group missing a row would bias its advantages) and the run finishes."""
    cfg, run_dir, store = open_run(
        load_config(_config(tiny, tmp_path, iterations=1, eval_before=False, eval_after=False)), None
    )
    build_loop(cfg, run_dir, store, show_progress=False).run()
    first = [t.trajectory_id for t in store.trajectories(0)]
    store.close()
    raw = sqlite3.connect(run_dir / "run.sqlite")  # as if killed after stage B: rollouts committed, no update
    raw.execute("UPDATE iterations SET status = ? WHERE iteration = 0", (IterationStatus.ROLLED_OUT,))
    raw.execute("DELETE FROM checkpoints")
    raw.execute("DELETE FROM metrics")
    raw.execute("UPDATE trajectories SET json = '{\"cut' WHERE rowid = (SELECT MIN(rowid) FROM trajectories)")
    raw.commit()
    raw.close()
    cfg, run_dir, store = open_run(None, run_dir)
    with caplog.at_level("WARNING"):
        build_loop(cfg, run_dir, store, show_progress=False).run()
    assert any("rolling out again" in r.getMessage() for r in caplog.records)
    again = store.trajectories(0)
    assert len(again) == len(first) and not set(first) & {t.trajectory_id for t in again}  # a fresh batch
    assert store.completed_iterations() == [0] and store.checkpoints()
    store.close()


def test_an_environment_without_tasks_trains_on_its_own_synthesized_tasks(tiny, tmp_path, monkeypatch):
    """Issue 54 (7): an environment nobody wrote tasks for (no task source) stopped every run with "registers no task
    source". With self-questioning at λ = 1 it trains on its synthesized tasks and is evaluated on held-out
    synthesized ones; without them, one line says what to give."""
    from dataclasses import replace

    from evolvekit.errors import EnvError
    from evolvekit.orchestrator import build
    from evolvekit.types import Task, TaskSource

    def synthetic(prefix, n):
        return [
            Task(task_id=f"{prefix}-{i}", env_name="coin_notask", query=f"Say {i}.", source=TaskSource.SYNTHETIC)
            for i in range(n)
        ]

    held = tmp_path / "held.jsonl"
    held.write_text("".join(t.model_dump_json() + "\n" for t in synthetic("held", 2)))
    base = ["env.name=coin_notask", "env.plugins=[notask_env]"]
    alone = [*base, "questioning.enabled=true", "questioning.hybrid_lambda=1.0"]

    def loop_for(sets, parts=build.PARTS):
        cfg = load_config(_config(tiny, tmp_path / str(len(list(tmp_path.iterdir()))), iterations=1), sets)
        cfg, run_dir, store = open_run(cfg, None)
        return build_loop(cfg, run_dir, store, show_progress=False, parts=parts), store

    with pytest.raises(EnvError, match="has no person-written tasks .*questioning.enabled: true"):
        loop_for(base)
    with pytest.raises(EnvError, match="held-out evaluation: .*train.eval_synthetic"):
        loop_for(alone)
    real_stage = build.synthesis_stage

    def scripted(cfg, train_tasks, policy, engine, env_factory, receive):  # as if the explorer had found 3 tasks
        stage = real_stage(cfg, train_tasks, policy, engine, env_factory, receive)
        stage.synthesize = lambda stored, funnel, on_round: (synthetic("syn", 3), funnel)
        return stage

    loop, store = loop_for([*alone, f"train.eval_synthetic={held}"], replace(build.PARTS, synthesis=scripted))
    summary = loop.run()
    assert {t.task_id for t in store.trajectories(0)} <= {f"syn-{i}" for i in range(3)}
    assert "synthetic/avg@2" in summary["eval_before"] and "avg@2" not in summary["eval_before"]
    store.close()


@pytest.mark.slow
def test_report_to_writes_wandb_offline_and_mlflow_beside_tensorboard(tiny, tmp_path):
    """Issue 54 (8): train.report_to. One tiny run reports to TensorBoard, W&B (offline, no network) and MLflow (a
    file store in the run folder); extended by one iteration it continues the same W&B and MLflow runs."""
    from mlflow.tracking import MlflowClient

    sets = ["train.report_to=[tensorboard, wandb, mlflow]"]
    cfg, run_dir, store = open_run(
        load_config(_config(tiny, tmp_path, iterations=1, eval_before=False, eval_after=False), sets), None
    )
    build_loop(cfg, run_dir, store, show_progress=False).run()
    store.close()
    assert list((run_dir / "tensorboard").glob("events.*"))
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    cfg, run_dir, store = open_run(None, run_dir, overrides=["train.iterations=2"])
    build_loop(cfg, run_dir, store, show_progress=False).run()
    store.close()
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    run_id = (run_dir / "mlruns" / "evolvekit_run_id").read_text().strip()
    steps = [m.step for m in client.get_metric_history(run_id, "rollout/reward_mean")]
    assert steps == [0, 1]  # both iterations, in one MLflow run
    assert client.get_run(run_id).data.params["train.iterations"] == "1"  # the config as the run began
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) >= 1


def test_the_loop_commits_what_the_task_supply_added_in_the_iterations_transaction(tiny, tmp_path):
    """Issue 55: stages do not write the store; the loop commits what the supply's observe added (CoEvolve's new
    tasks) in the iteration's final transaction."""
    cfg, run_dir, store = open_run(
        load_config(_config(tiny, tmp_path, iterations=2, eval_before=False, eval_after=False)), None
    )
    loop = build_loop(cfg, run_dir, store, show_progress=False)
    inner = loop.stages.supply

    class Recording:
        commits: list = []

        def tasks(self, ctx):
            return inner.tasks(ctx)

        def training_set(self):
            return inner.training_set()

        def observe(self, ctx, trajectories):
            return inner.observe(ctx, trajectories)

        def commit(self, c, store_, iteration):
            self.commits.append((iteration, c.in_transaction, store.completed_iterations()))

    loop.stages.supply = Recording()
    loop.run()
    # each iteration's commit runs inside its final transaction, before the iteration is marked done
    assert Recording.commits == [(0, True, []), (1, True, [0])]
    store.close()
