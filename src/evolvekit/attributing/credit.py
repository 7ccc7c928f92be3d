"""Self-attributing credit assignment (AgentEvolver §5.2-5.4, Eq. 18-21) as plain functions.

Per GRPO group: GOOD/BAD labels → ±1 attribution rewards, standardised with *trajectory-level* statistics
(Eq. 18; or, with ``population="step"``, over every attributed step of the group, the "step-level normalization
(within group)" of the paper's implementation details, §7.1); outcome rewards standardised separately over the
group (Eq. 19); fused per step with α, the outcome only at the last step (Eq. 20); the advantage is the undiscounted
return-to-go (Eq. 21). A channel whose statistics are degenerate (σ below ``degenerate_std``) is neutralised
(contributes 0). Standard deviations are the unbiased sample std, as in Eq. 16.
"""

from __future__ import annotations

from typing import Literal, Sequence

from evolvekit.train.losses import sample_std, standardize
from evolvekit.types import StepLabel

Mode = Literal["both", "outcome_only", "attribution_only"]
Population = Literal["trajectory", "step"]


def attribution_rewards(labels: Sequence[StepLabel]) -> list[float]:
    """§5.2: GOOD → +1, BAD → −1 (and grounded credit's NEUTRAL → 0)."""
    return [1.0 if lab == StepLabel.GOOD else 0.0 if lab == StepLabel.NEUTRAL else -1.0 for lab in labels]


_std = sample_std  # σ of Eq. 18 (train/losses.py: one definition for every group statistic)


def _population(rewards: Sequence[Sequence[float] | None], population: Population) -> list[float]:
    """The values μ and σ of the attribution channel are taken over: each attributed trajectory's average reward
    (``trajectory``, Eq. 18) or each attributed step's reward (``step``, §7.1)."""
    if population == "step":
        return [x for r in rewards if r for x in r]
    if population == "trajectory":
        return [sum(r) / len(r) for r in rewards if r]
    raise ValueError(f"population must be 'trajectory' or 'step', not {population!r}")


def standardize_attribution(
    rewards: Sequence[Sequence[float] | None],
    eps: float = 1e-8,
    degenerate_std: float = 1e-6,
    population: Population = "trajectory",
) -> list[list[float]]:
    """Eq. 18: r̂_t = (r_t − μ) / (σ + ε), μ and σ over the per-trajectory *average* attribution rewards (§5.2), or
    over every step's reward of the group with ``population="step"`` (§7.1's step-level normalization within the
    group: a group whose trajectories all average the same, e.g. every one a GOOD call then a BAD answer, keeps its
    per-step signal).

    ``None`` marks a trajectory whose attribution failed (neutralised): it gets zeros and is left out of μ, σ.
    A degenerate population (fewer than two trajectories, or σ < ``degenerate_std``) gives zeros for all.
    """
    if attribution_degenerate(rewards, degenerate_std, population):
        return [[0.0] * len(r) if r else [] for r in rewards]
    values = _population(rewards, population)
    mu, sigma = sum(values) / len(values), _std(values)
    return [[(x - mu) / (sigma + eps) for x in r] if r else [] for r in rewards]


def attribution_degenerate(
    rewards: Sequence[Sequence[float] | None], degenerate_std: float = 1e-6, population: Population = "trajectory"
) -> bool:
    """True when Eq. 18's population is degenerate (fewer than two attributed trajectories, or σ of the population
    — the trajectories' average attribution rewards, or with ``population="step"`` the steps' rewards — below
    ``degenerate_std``, e.g. every step judged GOOD): the channel is then 0 for all."""
    attributed = [r for r in rewards if r]
    return len(attributed) < 2 or _std(_population(attributed, population)) < degenerate_std


def standardize_outcome(outcomes: Sequence[float], eps: float = 1e-8, degenerate_std: float = 1e-6) -> list[float]:
    """Eq. 19: r̂_out = (R − μ_out) / (σ_out + ε) over the trajectories of the group (0 when degenerate)."""
    return standardize(outcomes, eps, degenerate_std)


def fuse(attr_hat: Sequence[float], out_hat: float, alpha: float, mode: Mode = "both") -> list[float]:
    """Eq. 20: r̂_t = α·r̂_t^attr + 1[t = T]·r̂^out; ``mode`` gives Table 5's ablations."""
    n = len(attr_hat)
    use_attr = mode in ("both", "attribution_only")
    use_out = mode in ("both", "outcome_only")
    return [
        (alpha * a if use_attr else 0.0) + (out_hat if use_out and t == n - 1 else 0.0) for t, a in enumerate(attr_hat)
    ]


def returns_to_go(rewards: Sequence[float]) -> list[float]:
    """Eq. 21: A_t = Σ_{k ≥ t} r̂_k (undiscounted)."""
    out, acc = [0.0] * len(rewards), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc += rewards[t]
        out[t] = acc
    return out


def group_step_advantages(
    labels: Sequence[Sequence[StepLabel] | None],
    outcomes: Sequence[float],
    num_steps: Sequence[int],
    alpha: float,
    mode: Mode = "both",
    eps: float = 1e-8,
    degenerate_std: float = 1e-6,
    population: Population = "trajectory",
) -> list[list[float]]:
    """Eq. 18-21 for one group: per trajectory, one advantage per step (``population``: Eq. 18's statistics over
    trajectory averages, or over steps, §7.1).

    ``labels[i]`` has one label per step of trajectory i, or is None when its attribution was neutralised (its
    attribution channel is then 0 for every step and the outcome channel still applies at the last step).
    """
    attr = standardize_attribution(
        [attribution_rewards(lab) if lab is not None else None for lab in labels], eps, degenerate_std, population
    )
    out = standardize_outcome(outcomes, eps, degenerate_std)
    result = []
    for a, o, n in zip(attr, out, num_steps):
        a = a if len(a) == n else [0.0] * n
        result.append(returns_to_go(fuse(a, o, alpha, mode)))
    return result
