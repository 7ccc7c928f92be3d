"""benchmarks/evidence/learning_seeds.py: the per-seed aggregation of held-out curves."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "evidence"))

from learning_seeds import aggregate  # noqa: E402


def _result(values: dict[int, float], cold: float | None = None) -> dict:
    curve = [{"iteration": it - 1, "avg@8": v} for it, v in values.items()]
    if cold is not None:  # a cold-start row is not a point of the RL curve
        curve.insert(1, {"iteration": -1, "phase": "cold_start", "avg@8": cold})
    return {"heldout_curve": curve}


def test_aggregate_mean_std_over_common_points():
    rows = aggregate(
        [_result({0: 0.2, 4: 0.6, 8: 0.8}, cold=0.5), _result({0: 0.4, 4: 0.8, 8: 1.0}), _result({0: 0.3, 4: 0.7})], k=8
    )
    assert [r["iteration"] for r in rows] == [0, 4]  # iteration 8 is missing from one seed
    assert rows[0]["mean"] == 0.3 and rows[0]["values"] == [0.2, 0.4, 0.3]
    assert abs(rows[1]["std"] - 0.1) < 1e-9  # sample std of 0.6, 0.8, 0.7
