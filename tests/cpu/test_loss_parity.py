"""Parity of the GRPO advantages and loss with TRL's and veRL's formulas on fixed tensors.

The reference functions below are transcriptions of the two libraries' code (TRL 1.x ``GRPOTrainer._compute_loss``
with ``loss_type="dapo"`` and its advantage normalisation; veRL ``core_algos.compute_grpo_outcome_advantage``,
``compute_policy_loss_vanilla`` with ``loss_agg_mode="token-mean"`` and ``kl_penalty(..., "low_var_kl")``), written
out so the test needs neither package. One documented difference: veRL's dual clip (``clip_ratio_c`` = 3) bounds
the loss of negative-advantage tokens whose ratio exceeds 3; AgentEvolver's Eq. 17 has no dual clip.
"""

from __future__ import annotations

import torch

from evolvekit.train.losses import group_advantages, policy_loss

torch.manual_seed(0)
B, T = 4, 6
LOGP = torch.randn(B, T) * 0.3 - 1.0
OLD = LOGP + torch.randn(B, T) * 0.2  # ratios within (0.5, 2): no dual clip involved
REF = LOGP + torch.randn(B, T) * 0.1
MASK = (torch.rand(B, T) > 0.2).float()
REWARDS = [1.0, 0.0, 0.0, 1.0]
GROUPS = ["g", "g", "g", "g"]


def trl_advantages(rewards: torch.Tensor, group: int, eps: float = 1e-4) -> torch.Tensor:
    mean = rewards.view(-1, group).mean(dim=1).repeat_interleave(group)
    std = rewards.view(-1, group).std(dim=1).repeat_interleave(group)
    return (rewards - mean) / (std + eps)


def verl_advantages(scores: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return (scores - scores.mean()) / (scores.std() + eps)  # one uid group


def trl_loss(logp, old, ref, adv, mask, eps_low, eps_high, beta):
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * adv.unsqueeze(1), coef_2 * adv.unsqueeze(1))
    per_token_kl = torch.exp(ref - logp) - (ref - logp) - 1
    per_token_loss = per_token_loss + beta * per_token_kl
    return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)  # loss_type "dapo": global token mean


def verl_loss(logp, old, ref, adv, mask, eps_low, eps_high, beta, clip_ratio_c=3.0):
    advantages = adv.unsqueeze(1).expand_as(logp)
    ratio = torch.exp(logp - old)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    kl = ref - logp
    kld = torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)  # low_var_kl
    total = pg_losses + beta * kld
    return (total * mask).sum() / mask.sum()  # token-mean


def ours(adv, eps_low=0.2, eps_high=0.28, beta=0.001, logp=LOGP, old=OLD):
    loss, _ = policy_loss(
        logp,
        old,
        adv.unsqueeze(1).expand_as(logp),
        MASK,
        torch.zeros(B, dtype=torch.bool),
        eps_low=eps_low,
        eps_high=eps_high,
        ref_logprobs=REF,
        kl_beta=beta,
    )
    return loss


def test_group_advantages_match_trl_and_verl():
    r = torch.tensor(REWARDS)
    assert torch.allclose(torch.tensor(group_advantages(REWARDS, GROUPS, eps_norm=1e-4)), trl_advantages(r, 4))
    assert torch.allclose(torch.tensor(group_advantages(REWARDS, GROUPS, eps_norm=1e-6)), verl_advantages(r))
    # an all-equal group: 0 everywhere in all three
    same = torch.ones(4)
    assert group_advantages([1.0] * 4, GROUPS) == [0.0] * 4 and torch.all(verl_advantages(same) == 0)


def test_policy_loss_matches_trl_and_verl_on_fixed_tensors():
    adv = torch.tensor(group_advantages(REWARDS, GROUPS, eps_norm=1e-6))
    for eps_low, eps_high, beta in ((0.2, 0.28, 0.001), (0.1, 0.15, 0.01), (0.2, 0.2, 0.0)):
        mine = ours(adv, eps_low, eps_high, beta)
        assert torch.allclose(mine, trl_loss(LOGP, OLD, REF, adv, MASK, eps_low, eps_high, beta), atol=1e-6)
        assert torch.allclose(mine, verl_loss(LOGP, OLD, REF, adv, MASK, eps_low, eps_high, beta), atol=1e-6)


def test_the_one_difference_is_verls_dual_clip():
    adv = torch.tensor([-1.0, -1.0, 1.0, 1.0])
    old = LOGP - 1.5  # ratio e^1.5 ≈ 4.5 > 3 on every token
    mine = ours(adv, beta=0.0, old=old)
    assert torch.allclose(mine, trl_loss(LOGP, old, REF, adv, MASK, 0.2, 0.28, 0.0), atol=1e-6)
    assert not torch.allclose(mine, verl_loss(LOGP, old, REF, adv, MASK, 0.2, 0.28, 0.0), atol=1e-3)
