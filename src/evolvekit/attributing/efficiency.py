"""Learning-efficiency figures of AgentEvolver Table 6: Steps@0.9 and the area under the curve."""

from __future__ import annotations

from typing import Sequence


def steps_to_fraction(steps: Sequence[float], values: Sequence[float], target: float) -> float | None:
    """First step at which ``values`` reach ``target`` (e.g. 0.9 × the baseline's best); None if never."""
    for s, v in zip(steps, values):
        if v >= target:
            return float(s)
    return None


def area_under_curve(steps: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoidal area under a curve, divided by its step span (so it is on the curve's own scale)."""
    if len(steps) < 2:
        return float(values[0]) if values else 0.0
    area = sum((steps[i + 1] - steps[i]) * (values[i + 1] + values[i]) / 2 for i in range(len(steps) - 1))
    return area / (steps[-1] - steps[0])
