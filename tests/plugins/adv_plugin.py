"""A test-only plugin module (env.plugins: [adv_plugin]) that registers an advantage estimator: each step's
advantage is its trajectory's outcome minus 0.5 (a REINFORCE baseline of 0.5), so a test can see it used."""

from __future__ import annotations

from evolvekit.train.advantages import AdvantageBatch, StepAdvantages, register_advantage


@register_advantage("half_baseline")
def half_baseline(batch: AdvantageBatch) -> StepAdvantages:
    adv = [{s.index: float(t.outcome_reward or 0.0) - 0.5 for s in t.steps} for t in batch.trajectories]
    return adv, {"half_baseline/trajectories": float(len(adv))}
