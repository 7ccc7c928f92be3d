"""Issue 55 (4): advantage estimators are registered functions (veRL style). A new algorithm is one function, one
registration and one config value; `run` and `config validate` both refuse an unknown name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import evolvekit.attributing.estimators  # noqa: F401 - registers dual_channel and gigpo
from evolvekit.config import advantage_estimator, load_config
from evolvekit.errors import ConfigError
from evolvekit.orchestrator.stages import IterationContext
from evolvekit.train.advantages import ADVANTAGE_ESTIMATORS, get_advantage, register_advantage
from evolvekit.train.sample_stage import GRPOSamples
from evolvekit.types import Step, Trajectory

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def _group(outcomes):
    """Two-step trajectories whose second prompt extends the first (one training sequence each)."""
    trajs = []
    for r in outcomes:
        t = Trajectory(task_id="t", group_id="g", outcome_reward=r)
        t.steps = [
            Step(index=0, action_text="a", prompt_token_ids=[1, 2], completion_token_ids=[3, 4], state_key="start"),
            Step(index=1, action_text="b", prompt_token_ids=[1, 2, 3, 4, 5], completion_token_ids=[6, 7]),
        ]
        trajs.append(t)
    return trajs


def test_the_built_in_estimators_are_registered_and_unknown_names_are_named():
    assert {"grpo", "dual_channel", "gigpo"} <= set(ADVANTAGE_ESTIMATORS)
    with pytest.raises(
        ValueError, match=r"unknown advantage estimator 'nope' \(registered: .*dual_channel, gigpo, grpo"
    ):
        get_advantage("nope")
    with pytest.raises(ValueError, match="^advantage estimator 'grpo' is already registered$"):
        register_advantage("grpo")(lambda batch: ([], {}))


def test_a_batch_groups_by_group_id_and_a_trajectory_without_one_is_its_own_group():
    from evolvekit.config import AttributingConfig
    from evolvekit.train.advantages import AdvantageBatch

    trajs = [
        Trajectory(task_id="t", group_id="g"),
        Trajectory(task_id="t"),
        Trajectory(task_id="t", group_id="g"),
        Trajectory(task_id="t"),
    ]
    batch = AdvantageBatch(trajs, [None] * 4, 0, 1e-6, AttributingConfig())
    assert batch.groups() == [[0, 2], [1], [3]]


def test_alpha_follows_its_schedule_and_holds_the_last_value():
    """Eq. 20's α per iteration (attributing.alpha_schedule), else the constant attributing.alpha."""
    from evolvekit.attributing.estimators import alpha_for
    from evolvekit.config import AttributingConfig

    scheduled = AttributingConfig(alpha=0.9, alpha_schedule=[0.1, 0.2, 0.3])
    assert [alpha_for(scheduled, i) for i in range(5)] == [0.1, 0.2, 0.3, 0.3, 0.3]
    assert [alpha_for(AttributingConfig(alpha=0.7), i) for i in (0, 4)] == [0.7, 0.7]


@pytest.mark.parametrize(
    "overrides, want",
    [
        ([], "grpo"),
        (["attributing.enabled=true"], "dual_channel"),
        (["attributing.enabled=true", "attributing.source=gigpo"], "gigpo"),
        (["train.advantage_estimator=gigpo"], "gigpo"),  # GiGPO needs no attributing section
        (["attributing.enabled=true", "attributing.mode=outcome_only", "train.advantage_estimator=grpo"], "grpo"),
    ],
)
def test_auto_resolves_from_the_attributing_section(overrides, want):
    assert advantage_estimator(load_config(None, overrides)) == want


def test_an_estimator_that_would_ignore_computed_labels_is_refused():
    with pytest.raises(ConfigError, match="train.advantage_estimator: grpo reads no step labels"):
        load_config(None, ["attributing.enabled=true", "attributing.source=grounded", "train.advantage_estimator=grpo"])
    with pytest.raises(ConfigError, match="advantage_estimator"):
        load_config(None, ["train.advantage_estimator=Not A Name"])


def test_the_sample_stage_uses_the_configured_estimator(tmp_path):
    """The same group through grpo (Eq. 16: ±0.707 for outcomes 1, 0) and gigpo by config value alone: the first
    steps share an anchor state, so GiGPO adds their step group's A^S (±0.707 again) to A^E there; the second
    steps have no anchor and keep A^E alone."""
    ctx = IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=None)  # type: ignore[arg-type]
    grpo, _ = GRPOSamples.from_config(load_config(None, [])).build(ctx, _group([1.0, 0.0]))
    assert [s.token_advantages[-1] for s in grpo] == pytest.approx([0.7071, -0.7071], abs=1e-3)
    cfg = load_config(None, ["train.advantage_estimator=gigpo"])
    gigpo, metrics = GRPOSamples.from_config(cfg).build(ctx, _group([1.0, 0.0]))
    assert "gigpo/step_groups" in metrics
    first = 2  # the first completion token of step 0 in the merged sequence [1, 2, 3, 4, 5, 6, 7]
    assert [s.token_advantages[first] for s in gigpo] == pytest.approx([1.4142, -1.4142], abs=1e-3)
    assert [s.token_advantages[-1] for s in gigpo] == pytest.approx([0.7071, -0.7071], abs=1e-3)


def test_a_plugin_estimator_is_one_function_one_registration_one_config_value(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    from evolvekit.env.registry import load_plugins

    load_plugins(["adv_plugin"])  # what env.plugins does at `run`
    cfg = load_config(None, ["env.plugins=[adv_plugin]", "train.advantage_estimator=half_baseline"])
    ctx = IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=None)  # type: ignore[arg-type]
    samples, metrics = GRPOSamples.from_config(cfg).build(ctx, _group([1.0, 0.0, 0.0]))
    assert [s.token_advantages[-1] for s in samples] == [0.5, -0.5, -0.5]
    assert metrics["half_baseline/trajectories"] == 3.0


@pytest.mark.slow
def test_config_validate_and_run_refuse_an_unknown_estimator_the_same_way(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"env:\n  name: bfcl\n  family: arith\nrun:\n  out_dir: {tmp_path / 'runs'}\n")

    def cli(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "evolvekit.cli.main", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)

    bad = ("--set", "train.advantage_estimator=no_such_thing")
    for args in (("config", "validate", str(cfg), *bad), ("run", str(cfg), *bad)):
        res = cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "train.advantage_estimator: unknown estimator 'no_such_thing'" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists()  # run refused before making a run folder
    ok = cli("config", "validate", str(cfg), "--set", "train.advantage_estimator=half_baseline",
             "--set", "env.plugins=[adv_plugin]")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    res = cli("config", "validate", str(cfg), "--set", "env.name=nowhere")
    assert res.returncode == 2 and "env.name: unknown environment 'nowhere'" in res.stderr  # as `run` says it


def test_a_plugin_step_credit_source_is_one_function_one_registration_one_config_value(tmp_path, monkeypatch):
    """Issue 55 (4): step-credit sources are registered like estimators (attributing/sources.py): a plugin's
    source labels the steps by config value alone; an unknown name is one line from run and config validate."""
    from evolvekit.attributing.sources import STEP_CREDIT
    from evolvekit.attributing.stage import AttributedSamples
    from evolvekit.env.registry import load_plugins
    from evolvekit.orchestrator.run_dir import registry_problem
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import StepLabel, Task

    monkeypatch.syspath_prepend(str(PLUGINS))
    load_plugins(["adv_plugin"])
    assert {"grounded", "llm", "first_good"} <= set(STEP_CREDIT)
    on = ["env.plugins=[adv_plugin]", "attributing.enabled=true", "attributing.normalization=step"]
    cfg = load_config(None, [*on, "attributing.source=first_good"])
    assert registry_problem(cfg) is None
    store = RunStore(tmp_path / "run.db")
    with store.transaction() as c:
        store.put_tasks(c, [Task(task_id="t", env_name="bfcl", query="q")], -1)
    ctx = IterationContext(iteration=0, seed=0, run_dir=tmp_path, store=store)
    group = _group([1.0, 0.0])
    adv, metrics = AttributedSamples.from_config(cfg, None).step_advantages(ctx, group)
    assert [t.step_attributions for t in group] == [[StepLabel.GOOD, StepLabel.BAD]] * 2
    assert {t.attribution_source for t in group} == {"first_good"} and metrics["first_good/trajectories"] == 2.0
    assert all(a[0] > a[1] for a in adv)  # the GOOD first step is credited above the BAD second, in both
    bad = load_config(None, [*on, "attributing.source=no_such_source"])
    assert registry_problem(bad) == (
        "attributing.source: unknown step-credit source 'no_such_source' (registered: first_good, gigpo, grounded, "
        "llm; env.plugins)"
    )
    store.close()


def test_the_sample_stage_by_hand(tmp_path):
    """GRPOSamples.build's own work (mutmut's first look at train/sample_stage.py: 50 of 89): crashed rollouts are
    left out and counted, every estimator sees one label slot per live trajectory and the iteration, the hybrid
    scale is asked with the iteration's context and multiplies the advantages, the length cap and experience
    stripping come from the settings, and the metrics by name: samples, too long, crashed, groups and groups whose
    outcomes are all equal (a trajectory without a group is its own)."""
    from evolvekit.train.advantages import ADVANTAGE_ESTIMATORS
    from evolvekit.train.sample_stage import SampleSettings
    from evolvekit.types import TrajectoryFlags

    sets = ["navigating.strip_experience=false", "train.max_sequence_tokens=99", "train.eps_norm=0.01"]
    cfg = load_config(None, sets)
    settings = SampleSettings.of(cfg)
    assert (settings.strip_experience, settings.max_sequence_tokens, settings.eps_norm) == (False, 99, 0.01)
    assert settings.estimator == "grpo" and settings.attributing is cfg.attributing
    ctx = IterationContext(iteration=4, seed=0, run_dir=tmp_path, store=None)  # type: ignore[arg-type]
    seen: list = []
    grpo = ADVANTAGE_ESTIMATORS["grpo"]

    def recording(batch):
        seen.append((len(batch.trajectories), list(batch.labels), batch.iteration))
        return grpo(batch)

    trajs = _group([1.0, 0.0]) + _group([1.0, 1.0])
    for t in trajs[2:]:
        t.group_id = "h"  # all passed: degenerate
    crashed = _group([0.0])[0].model_copy(update={"flags": TrajectoryFlags(failed=True)})
    alone = _group([0.5])[0].model_copy(update={"group_id": None, "outcome_reward": None})  # its own group
    scales: list = []

    def scale(c):
        scales.append(c)
        return lambda t: 2.0

    stage = GRPOSamples.from_config(cfg, scale)
    stage.estimator = recording
    samples, metrics = stage.build(ctx, [*trajs, crashed, alone])
    assert seen == [(5, [None] * 5, 4)] and scales == [ctx]
    # Eq. 16 with ε_norm 0.01: ±0.5 / (0.7071 + 0.01) = ±0.6972, times the scale 2
    assert [s.token_advantages[-1] for s in samples[:2]] == pytest.approx([1.3945, -1.3945], abs=1e-3)
    assert metrics == {
        "samples/count": 5,
        "samples/skipped_too_long": 0,
        "samples/skipped_failed": 1,
        "samples/groups": 3,
        "samples/degenerate_groups": 2,  # "h" (1, 1) and the lone trajectory; "g" (1, 0) is not
    }
    unscaled, _ = GRPOSamples.from_config(cfg).build(ctx, trajs[:2])
    assert [s.token_advantages[-1] for s in unscaled] == pytest.approx([0.6972, -0.6972], abs=1e-3)
    short = load_config(None, ["train.max_sequence_tokens=3"])
    none, metrics = GRPOSamples.from_config(short).build(ctx, trajs[:2])
    assert none == [] and metrics["samples/skipped_too_long"] == 2 and metrics["samples/count"] == 0
    # experience stripping (§4.3) is the settings': a guided trajectory's experience tokens [9, 9] go, unless it is off
    from evolvekit.types import SpanKind, TokenSpan

    guided = _group([1.0, 0.0])
    for t in guided:
        t.steps[0] = t.steps[0].model_copy(
            update={"prompt_token_ids": [1, 9, 9, 2], "spans": [TokenSpan(start=1, end=3, kind=SpanKind.EXPERIENCE)]}
        )
        t.steps[1] = t.steps[1].model_copy(update={"prompt_token_ids": [1, 9, 9, 2, 3, 4, 5]})
    kept, _ = GRPOSamples.from_config(cfg).build(ctx, guided)
    stripped, _ = GRPOSamples.from_config(load_config(None, [])).build(ctx, guided)
    assert kept[0].token_ids[:4] == [1, 9, 9, 2] and stripped[0].token_ids[:3] == [1, 2, 3]
