"""A test-only plugin module (env.plugins: [adv_plugin]) that registers an advantage estimator: each step's
advantage is its trajectory's outcome minus 0.5 (a REINFORCE baseline of 0.5), so a test can see it used."""

from __future__ import annotations

from evolvekit.train.advantages import AdvantageBatch, StepAdvantages, register_advantage


@register_advantage("half_baseline")
def half_baseline(batch: AdvantageBatch) -> StepAdvantages:
    adv = [{s.index: float(t.outcome_reward or 0.0) - 0.5 for s in t.steps} for t in batch.trajectories]
    return adv, {"half_baseline/trajectories": float(len(adv))}


from evolvekit.attributing.sources import CreditInputs, CreditResult, register_step_credit  # noqa: E402
from evolvekit.types import StepLabel  # noqa: E402


@register_step_credit("first_good")
def first_good(inputs: CreditInputs) -> CreditResult:
    """A test-only step-credit source: each trajectory's first step GOOD, the others BAD."""
    labels = [[StepLabel.GOOD if i == 0 else StepLabel.BAD for i in range(len(t.steps))] for t in inputs.trajectories]
    return CreditResult(labels=list(labels), metrics={"first_good/trajectories": float(len(labels))})
