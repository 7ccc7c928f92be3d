"""Advantages and the policy loss as plain torch functions (AgentEvolver §4.3, §5.4, §6.4).

Every function is pure: tensors in, tensors out, no module state. Shapes: ``B`` sequences, ``T`` tokens.
Token-level arrays are aligned with the *target* tokens (the token whose log-probability is scored).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import torch


def sample_std(values: Sequence[float]) -> float:
    """The unbiased sample standard deviation (n − 1; veRL's GRPO), 0 for fewer than two values, NaN when a value is
    not finite (``statistics.stdev`` raises on those): the σ of AgentEvolver Eqs. 16, 18 and 19 and of GiGPO's groups
    (one definition for all of them)."""
    if len(values) < 2:
        return 0.0
    if not all(math.isfinite(v) for v in values):
        return math.nan
    return statistics.stdev(values)


def standardize(values: Sequence[float], eps: float, degenerate_std: float = 1e-6) -> list[float]:
    """(x − μ) / (σ + ε) over ``values`` (Eqs. 16 and 19); all 0 when the population carries no signal: fewer
    than two values, or σ below ``degenerate_std`` or not finite."""
    sigma = sample_std(values)
    if len(values) < 2 or not math.isfinite(sigma) or sigma < degenerate_std:
        return [0.0] * len(values)
    mu = sum(values) / len(values)
    return [(x - mu) / (sigma + eps) for x in values]


def group_advantages(
    rewards: Sequence[float], group_ids: Sequence[str], eps_norm: float = 1e-6, degenerate_std: float = 1e-6
) -> list[float]:
    """Group-normalised advantages, AgentEvolver Eq. 16: Â_i = (R_i − mean(R_group)) / (std(R_group) + ε_norm).

    ``std`` is the unbiased sample standard deviation (as in veRL's GRPO). A group whose standard deviation is
    below ``degenerate_std`` (all rewards equal, or a group of one) carries no learning signal: its advantages
    are 0, never NaN. Results are in input order.
    """
    if len(rewards) != len(group_ids):
        raise ValueError("rewards and group_ids differ in length")
    out = [0.0] * len(rewards)
    groups: dict[str, list[int]] = {}
    for i, g in enumerate(group_ids):
        groups.setdefault(g, []).append(i)
    for idx in groups.values():
        for i, a in zip(idx, standardize([float(rewards[i]) for i in idx], eps_norm, degenerate_std)):
            out[i] = a
    return out


def broadcast_to_tokens(
    step_advantages: dict[int, float], step_spans: dict[int, tuple[int, int]], length: int, default: float = 0.0
) -> list[float]:
    """Give every token of step t's span the step's advantage (§5.4); tokens outside any step span get ``default``.

    For plain GRPO the same trajectory advantage is passed for every step.
    """
    out = [default] * length
    for step, (start, end) in step_spans.items():
        if step in step_advantages:
            for t in range(max(0, start), min(end, length)):
                out[t] = float(step_advantages[step])
    return out


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(π‖π_ref) with the k3 estimator: exp(ref − logp) − (ref − logp) − 1 (≥ 0; Eq. 17's KL term)."""
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0


def per_token_eps_high(
    advantages: torch.Tensor, guided: torch.Tensor, eps_high: float, eps_high_boost: float | None
) -> torch.Tensor:
    """Upper clip bound per token, Eq. 17: ε̂_high on tokens of experience-guided samples with positive advantage.

    ``guided`` is a ``[B]`` bool tensor; ``advantages`` is ``[B, T]``. Without a boost (None) every token gets
    ``eps_high``.
    """
    base = torch.full_like(advantages, eps_high)
    if eps_high_boost is None:
        return base
    boost = guided.to(torch.bool).unsqueeze(-1) & (advantages > 0)
    return torch.where(boost, torch.full_like(advantages, eps_high_boost), base)


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: torch.Tensor | float,
    log_ratio_clamp: float | None = None,
    dual_clip_c: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped objective loss, Eq. 17: −min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A), ρ = exp(logp − old).

    ``eps_high`` may be a tensor (per-token bounds from :func:`per_token_eps_high`). Two options of veRL's
    ``compute_policy_loss`` (off by default; veRL's values: 20 and 3): ``log_ratio_clamp`` clamps logp − old to
    [−c, c] before the exponential (no overflow from a far-off old log-prob); ``dual_clip_c`` bounds the loss of a
    negative-advantage token by −A·c (dual-clip PPO, Ye et al. 2020), so a ratio far above 1 on a bad token cannot
    dominate. Returns the per-token loss and a 0/1 tensor marking tokens where a clipped branch was taken (for the
    clip fraction metric).
    """
    log_ratio = logprobs - old_logprobs
    if log_ratio_clamp is not None:
        log_ratio = torch.clamp(log_ratio, min=-log_ratio_clamp, max=log_ratio_clamp)
    ratio = torch.exp(log_ratio)
    if not torch.is_tensor(eps_high):
        eps_high = torch.full_like(ratio, float(eps_high))
    clipped_ratio = torch.maximum(torch.minimum(ratio, 1.0 + eps_high), torch.full_like(ratio, 1.0 - eps_low))
    unclipped = ratio * advantages
    clipped = clipped_ratio * advantages
    loss = -torch.minimum(unclipped, clipped)
    taken = clipped < unclipped
    if dual_clip_c is not None:
        bound = -advantages * dual_clip_c
        dual = (advantages < 0) & (loss > bound)
        loss = torch.where(dual, bound, loss)
        taken = taken | dual
    return loss, taken.to(loss.dtype)


def token_mean(values: torch.Tensor, mask: torch.Tensor, denominator: float | None = None) -> torch.Tensor:
    """Token-mean aggregation over the loss mask: Σ values·mask / Σ mask (or / ``denominator``).

    Pass the whole batch's mask count as ``denominator`` when the batch is split in micro-batches, so the
    gradients add up to the token mean over the full batch.
    """
    mask = mask.to(values.dtype)
    denom = float(mask.sum().item()) if denominator is None else float(denominator)
    if denom <= 0:
        return (values * 0.0).sum()
    return (values * mask).sum() / denom


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    guided: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    eps_high_boost: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float | torch.Tensor = 0.0,
    denominator: float | None = None,
    weights: torch.Tensor | None = None,
    log_ratio_clamp: float | None = None,
    dual_clip_c: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The full token-level loss: clipped surrogate (Eq. 17) + β·KL_k3 − c_H·entropy, token-mean over ``mask``.

    A negative ``entropy_coef`` (Evolving-RL Eq. 3) penalises entropy; it may be a per-sample ``[B]`` tensor.
    ``weights`` (``[B]``) scale each sample's per-token loss (Evolving-RL Eq. 6: λ_e, λ_s). Returns the scalar
    loss and detached statistics (means over masked tokens).
    """
    bounds = per_token_eps_high(advantages, guided, eps_high, eps_high_boost)
    pg, clipped = clipped_surrogate(logprobs, old_logprobs, advantages, eps_low, bounds, log_ratio_clamp, dual_clip_c)
    total = pg
    stats: dict[str, float] = {}
    if ref_logprobs is not None and kl_beta != 0.0:
        kl = k3_kl(logprobs, ref_logprobs)
        total = total + kl_beta * kl
        stats["kl"] = float(token_mean(kl.detach(), mask))
    if entropy is not None:
        coef = entropy_coef.unsqueeze(-1) if torch.is_tensor(entropy_coef) else entropy_coef
        total = total - coef * entropy
        stats["entropy"] = float(token_mean(entropy.detach(), mask))
    if weights is not None:
        total = total * weights.unsqueeze(-1)
    loss = token_mean(total, mask, denominator)
    stats["pg_loss"] = float(token_mean(pg.detach(), mask))
    stats["clip_frac"] = float(token_mean(clipped, mask))
    stats["ratio"] = float(token_mean(torch.exp(logprobs - old_logprobs).detach(), mask))
    return loss, stats


def ratio_diagnostics(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    guided: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    eps_high_boost: float | None,
) -> dict[str, float]:
    """Sums over masked tokens, split by guided / vanilla samples, for Eq. 17's logged diagnostics.

    ``<g>_tokens``, ``<g>_clipped`` (tokens where the clipped branch was taken), ``<g>_ratio_dev`` (Σ|ρ − 1|) for
    g in guided, vanilla; and ``boost_changed``: guided tokens whose gradient the selective boost changes, i.e. with
    a positive advantage and 1 + ε_high < ρ ≤ 1 + ε̂_high (clipped, so zero gradient, without the boost; unclipped
    with it). Divide by the token counts for shares.
    """
    with torch.no_grad():
        ratio = torch.exp(logprobs - old_logprobs)
        bounds = per_token_eps_high(advantages, guided, eps_high, eps_high_boost)
        _, clipped = clipped_surrogate(logprobs, old_logprobs, advantages, eps_low, bounds)
        m = mask.to(torch.bool)
        g = guided.to(torch.bool).unsqueeze(-1).expand_as(m)
        out: dict[str, float] = {}
        for name, sel in (("guided", m & g), ("vanilla", m & ~g)):
            out[f"{name}_tokens"] = float(sel.sum())
            out[f"{name}_clipped"] = float(clipped[sel].sum())
            out[f"{name}_ratio_dev"] = float((ratio[sel] - 1.0).abs().sum())
        boost = eps_high if eps_high_boost is None else eps_high_boost
        changed = m & g & (advantages > 0) & (ratio > 1.0 + eps_high) & (ratio <= 1.0 + boost)
        out["boost_changed"] = float(changed.sum())
    return out
