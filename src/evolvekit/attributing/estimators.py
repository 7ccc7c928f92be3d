"""The attributing package's advantage estimators, registered by name (``train/advantages.py``):
``dual_channel`` (AgentEvolver §5.3-5.4, Eq. 18-21) and ``gigpo`` (GiGPO's two-level groups). Each is a pure
function of an ``AdvantageBatch``; the math is in ``credit.py`` and ``gigpo.py``."""

from __future__ import annotations

from evolvekit.attributing.credit import attribution_degenerate, attribution_rewards, group_step_advantages
from evolvekit.attributing.gigpo import gigpo_advantages, step_groups_summary
from evolvekit.config import AttributingConfig
from evolvekit.train.advantages import AdvantageBatch, StepAdvantages, register_advantage


def alpha_for(acfg: AttributingConfig, iteration: int) -> float:
    """α of Eq. 20 for this iteration: the schedule's entry (its last one past the end), else ``attributing.alpha``."""
    sched = acfg.alpha_schedule
    if not sched:
        return acfg.alpha
    return sched[min(iteration, len(sched) - 1)]


@register_advantage("dual_channel")
def dual_channel_advantages(batch: AdvantageBatch) -> StepAdvantages:
    """Eq. 18-21 per GRPO group: the attribution channel from the step labels (standardised, Eq. 18), the outcome
    channel (Eq. 19), fused with this iteration's α (Eq. 20), returns-to-go (Eq. 21). A trajectory without labels
    contributes no attribution channel; ``attributing.mode`` and ``normalization`` apply."""
    acfg = batch.attributing
    live, labels = batch.trajectories, batch.labels
    alpha = alpha_for(acfg, batch.iteration)
    step_adv: list[dict[int, float]] = [{} for _ in live]
    constant = 0  # groups whose attribution channel was degenerate (Eq. 18) and so contributed nothing
    mixed = mixed_live = 0  # groups with mixed outcomes, and those whose attribution channel was not constant
    for idx in batch.groups():
        degenerate = attribution_degenerate(
            [attribution_rewards(labels[i]) if labels[i] is not None else None for i in idx],  # type: ignore[arg-type]
            population=acfg.normalization,
        )
        constant += degenerate
        # mixed by the environment's check (a judge's constant score can hide a group's real spread)
        if len({live[i].checked_outcome for i in idx}) > 1:
            mixed += 1
            mixed_live += not degenerate
        advs = group_step_advantages(
            [labels[i] for i in idx],
            [float(live[i].outcome_reward or 0.0) for i in idx],
            [len(live[i].steps) for i in idx],
            alpha,
            acfg.mode,
            acfg.eps,
            population=acfg.normalization,
        )
        for i, a in zip(idx, advs):
            step_adv[i] = {s.index: a[k] for k, s in enumerate(live[i].steps)}
    metrics = {
        "attribution/alpha": alpha,
        "attribution/constant_channel_groups": float(constant),
        "attribution/mixed_groups": float(mixed),
        "attribution/mixed_groups_nondegenerate": float(mixed_live),
    }
    return step_adv, metrics


@register_advantage("gigpo")
def gigpo_step_advantages(batch: AdvantageBatch) -> StepAdvantages:
    """GiGPO's two-level advantages per GRPO group, from the anchor states the rollouts recorded; no labels."""
    acfg = batch.attributing
    live = batch.trajectories
    step_adv: list[dict[int, float]] = [{} for _ in live]
    metrics = {"gigpo/step_groups": 0.0, "gigpo/grouped_steps": 0.0}
    for idx in batch.groups():
        keys = [[s.state_key for s in live[i].steps] for i in idx]
        advs = gigpo_advantages(
            [float(live[i].outcome_reward or 0.0) for i in idx],
            keys,
            [[s.reward for s in live[i].steps] for i in idx],
            acfg.gigpo_gamma,
            acfg.gigpo_weight,
            acfg.gigpo_norm,
        )
        for k, v in step_groups_summary(keys).items():
            metrics[k] += v
        for i, a in zip(idx, advs):
            step_adv[i] = {s.index: a[k] for k, s in enumerate(live[i].steps)}
    return step_adv, metrics
