"""GiGPO's step-level credit (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training";
verl-agent), the peer baseline of self-attributing that needs no helper model.

Within one GRPO group (the trajectories of one task):

- the episode advantage is GRPO's: A^E(τ_i) = (R_i − mean_j R_j) / (std_j R_j + ε)  (Eq. 16 here);
- steps of the group's trajectories taken from the same environment state — the *anchor state* — form a step group
  (a state visited twice within one trajectory counts twice). Each step's discounted return
  G_t = Σ_{k ≥ t} γ^{k−t} r_k, with the outcome R as the last step's reward, is normalised inside its step group:
  A^S_t = (G_t − mean(G)) / (std(G) + ε) ("std" normalisation) or G_t − mean(G) ("mean");
  a step group of one, or with zero spread, gives A^S = 0;
- the step's advantage is A^E(τ_i) + ω·A^S_t (ω = 1, γ = 0.95: verl-agent's defaults).

"Same state" is the anchor the rollout records in ``Step.state_key`` (agent/rollout.py ``anchor_key``): the
environment's ``state_key()`` before the step together with every observation the episode has shown so far, as
verl-agent identifies a state by its observation; for BFCL the backend part is the turn index with a hash of every
backend instance's full attribute tree (env/bfcl/env.py); an environment without ``state_key()`` is anchored by
its observations alone. Steps without a key (trajectories recorded before anchors) form no step group (A^S = 0).
"""

from __future__ import annotations

from typing import Literal, Sequence

from evolvekit.train.losses import standardize

Norm = Literal["std", "mean"]


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = Σ_{k ≥ t} γ^{k−t} r_k."""
    out, acc = [], 0.0
    for r in reversed(rewards):
        acc = r + gamma * acc
        out.append(acc)
    return out[::-1]


def _normalised(values: Sequence[float], norm: Norm, eps: float, degenerate_std: float) -> list[float]:
    if norm not in ("std", "mean"):
        raise ValueError(f"GiGPO's norm must be 'std' or 'mean', not {norm!r}")
    if len(values) < 2:
        return [0.0] * len(values)
    if norm == "mean":
        mu = sum(values) / len(values)
        return [v - mu for v in values]
    return standardize(values, eps, degenerate_std)


def gigpo_advantages(
    outcomes: Sequence[float],
    state_keys: Sequence[Sequence[str | None]],
    step_rewards: Sequence[Sequence[float]] | None = None,
    gamma: float = 0.95,
    omega: float = 1.0,
    norm: Norm = "std",
    eps: float = 1e-6,
    degenerate_std: float = 1e-6,
) -> list[list[float]]:
    """One GRPO group: per trajectory, one advantage per step (A^E + ω·A^S). ``state_keys[i][t]`` is the anchor
    state of trajectory i's step t; ``step_rewards`` are the environment's per-step rewards (0 if None), to which
    the outcome is added at the last step."""
    episode = _normalised(list(outcomes), norm, eps, degenerate_std)
    returns = []
    for i, keys in enumerate(state_keys):
        r = list(step_rewards[i]) if step_rewards is not None else [0.0] * len(keys)
        if r:
            r[-1] += float(outcomes[i])
        returns.append(discounted_returns(r, gamma))
    groups: dict[str, list[tuple[int, int]]] = {}
    for i, keys in enumerate(state_keys):
        for t, key in enumerate(keys):
            if key is not None:
                groups.setdefault(key, []).append((i, t))
    step_adv = [[0.0] * len(keys) for keys in state_keys]
    for members in groups.values():
        for (i, t), a in zip(members, _normalised([returns[i][t] for i, t in members], norm, eps, degenerate_std)):
            step_adv[i][t] = a
    return [[episode[i] + omega * a for a in step_adv[i]] for i in range(len(state_keys))]


def step_groups_summary(state_keys: Sequence[Sequence[str | None]]) -> dict[str, float]:
    """How much step-level grouping a group offers: step groups with ≥ 2 members, and the steps in them."""
    counts: dict[str, int] = {}
    for keys in state_keys:
        for k in keys:
            if k is not None:
                counts[k] = counts.get(k, 0) + 1
    shared = [c for c in counts.values() if c >= 2]
    return {"gigpo/step_groups": float(len(shared)), "gigpo/grouped_steps": float(sum(shared))}
