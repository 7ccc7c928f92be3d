"""benchmarks/run_curves.py: per-run held-out curves and mechanism figures read from a run's folder."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from run_curves import curve, mechanism_cells  # noqa: E402


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
