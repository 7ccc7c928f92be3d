"""benchmarks/evidence/run_curves.py: per-run held-out curves and mechanism figures read from a run's folder."""

import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "evidence"))

from run_curves import attribution_cells, curve, mechanism_cells  # noqa: E402


def _run(tmp_path: Path, metrics: list[dict], after_iteration: int = 2) -> Path:
    run = tmp_path / "row" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    summary = {
        "eval_before": {"avg@8": 0.2, "best@8": 0.5},
        "eval_after": {"avg@8": 0.9, "best@8": 1.0, "iteration": after_iteration},
    }
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_curve_is_before_then_every_evaluation_then_the_final_one(tmp_path):
    run = _run(tmp_path, [{"iteration": 0, "eval/avg@8": 0.5}, {"iteration": 1}])
    assert curve(run) == [0.2, 0.5, 0.9]  # the last iteration's evaluation only in the summary


def test_curve_does_not_repeat_a_logged_final_evaluation(tmp_path):
    run = _run(tmp_path, [{"iteration": 0, "eval/avg@8": 0.5}, {"iteration": 1, "eval/avg@8": 0.9}])
    assert curve(run) == [0.2, 0.5, 0.9]


def test_guided_and_vanilla_rewards_are_weighted_by_rollouts(tmp_path):
    metrics = [
        {
            "navigating/guided_reward": 1.0,
            "navigating/guided_rollouts": 3.0,
            "train/guided_clip_frac": 0.02,
            "train/guided_tokens": 10.0,
            "navigating/vanilla_reward": 0.0,
            "navigating/vanilla_rollouts": 1.0,
            "attribution/mixed_groups": 2.0,
            "attribution/mixed_groups_nondegenerate": 1.0,
        },
        {
            "navigating/guided_reward": 0.0,
            "navigating/guided_rollouts": 1.0,
            "train/guided_clip_frac": 0.0,
            "train/guided_tokens": 0.0,
            "navigating/vanilla_reward": 0.5,
            "navigating/vanilla_rollouts": 1.0,
            "attribution/mixed_groups": 1.0,
            "attribution/mixed_groups_nondegenerate": 1.0,
        },
    ]
    guided, vanilla, clip, live = mechanism_cells(_run(tmp_path, metrics))
    assert (guided, vanilla) == ("0.75", "0.25")
    assert clip == "0.0200"  # iterations without guided tokens are not averaged in
    assert live == "2 of 3"


def test_a_run_without_the_mechanisms_shows_dashes(tmp_path):
    assert mechanism_cells(_run(tmp_path, [{"iteration": 0, "eval/avg@8": 0.5}])) == ["—", "—", "—", "—"]


def _store(run: Path, trajectories: dict[str, tuple[str, float, list[str]]]) -> Path:
    store = run / "run.sqlite"
    with sqlite3.connect(store) as con:
        con.execute(
            "CREATE TABLE trajectories "
            "(trajectory_id TEXT, iteration INT, phase TEXT, group_id TEXT, outcome_reward REAL)"
        )
        con.execute("CREATE TABLE steps (trajectory_id TEXT, step_index INT, label TEXT)")
        for tid, (gid, outcome, labels) in trajectories.items():
            con.execute("INSERT INTO trajectories VALUES (?, 0, 'train', ?, ?)", (tid, gid, outcome))
            con.executemany("INSERT INTO steps VALUES (?, ?, ?)", [(tid, i, lab) for i, lab in enumerate(labels)])
    return store


def test_attribution_share_and_unmixed_groups_from_hand_computed_advantages(tmp_path):
    run = _run(tmp_path, [{"iteration": 0, "attribution/alpha": 0.1}])
    store = _store(
        run,
        {
            "a": ("mixed", 1.0, ["GOOD", "GOOD"]),
            "b": ("mixed", 0.0, ["GOOD", "BAD"]),
            "c": ("failed", 0.0, ["GOOD", "GOOD"]),
            "d": ("failed", 0.0, ["BAD", "BAD"]),
        },
    )
    # Eq. 18-21 by hand, α = 0.1, s = 1/√2: mixed group A = [1.2s, 1.1s] and [−1.2s, −1.3s], outcome-only ±s per
    # step; failed group (outcome channel degenerate) A = [0.2s, 0.1s] and [−0.2s, −0.1s], all from attribution.
    # Σ|A − A_out| / Σ|A| = (0.8s + 0.6s) / (4.8s + 0.6s) = 0.259
    assert attribution_cells(store) == ["0.26", "1 of 1"]


def test_a_run_without_attribution_has_no_attribution_figures(tmp_path):
    run = _run(tmp_path, [{"iteration": 0, "eval/avg@8": 0.5}])
    assert attribution_cells(_store(run, {"a": ("g", 1.0, ["GOOD"])})) == ["—", "—"]


def test_the_step_population_of_a_run_gives_an_all_failed_chain_group_a_gradient(tmp_path):
    # every rollout a GOOD add then a BAD early answer, all failed: Eq. 18 over trajectory averages is degenerate,
    # over the group's steps (the run's attributing.normalization=step) it is not
    failed = {"a": ("failed", 0.0, ["GOOD", "BAD"]), "b": ("failed", 0.0, ["GOOD", "BAD"])}
    run = _run(tmp_path, [{"iteration": 0, "attribution/alpha": 0.1}])
    assert attribution_cells(_store(run, failed)) == ["—", "0 of 1"]  # no |A| at all
    (run / "run.sqlite").unlink()
    (run / "config.json").write_text(json.dumps({"attributing": {"normalization": "step"}}))
    assert attribution_cells(_store(run, failed)) == ["1.00", "1 of 1"]
