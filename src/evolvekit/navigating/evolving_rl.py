"""Evolving-RL (§3, Appendix A) as plain functions: skill rewards, the two groupings, the skill filter, and the
reliability of skill evaluation.

N candidate skills e_i are extracted from one source interaction; each is tested once on each of K related tasks
x_j, giving rewards r_ij (an N × K matrix).
- Extractor: R^e_i = mean_j r_ij (Eq. 2); the N skills form one GRPO group (Eq. 3's advantages).
- Solver: for each task j, the N skill-conditioned trajectories form one group (Eq. 4, cross-skill advantages).
- Joint objective: L = λ_e·L_e + λ_s·L_s (Eq. 6), with a negative entropy coefficient on the extractor (Eq. 3).
"""

from __future__ import annotations

import math
import unicodedata
from typing import Sequence

from evolvekit.train.losses import group_advantages


def skill_rewards(r: Sequence[Sequence[float]]) -> list[float]:
    """Eq. 2: R^e_i = (1/K) Σ_j r_ij."""
    return [sum(row) / len(row) if row else 0.0 for row in r]


def extractor_advantages(
    r: Sequence[Sequence[float]], valid: Sequence[bool] | None = None, eps: float = 1e-6
) -> list[float]:
    """GRPO advantages of the N skills of one source (invalid skills get reward 0 before normalising)."""
    rewards = skill_rewards(r)
    if valid is not None:
        rewards = [x if ok else 0.0 for x, ok in zip(rewards, valid)]
    return group_advantages(rewards, ["extractor"] * len(rewards), eps)


def solver_advantages(r: Sequence[Sequence[float]], eps: float = 1e-6) -> list[list[float]]:
    """Eq. 4: for each task j, normalise r_ij over the N skills (column-wise); returns an N × K matrix."""
    n = len(r)
    k = len(r[0]) if n else 0
    out = [[0.0] * k for _ in range(n)]
    for j in range(k):
        col = group_advantages([r[i][j] for i in range(n)], ["task"] * n, eps)
        for i in range(n):
            out[i][j] = col[i]
    return out


def abnormal_skill(text: str, max_non_ascii: float = 0.2) -> bool:
    """Appendix A.2's rule-based filter: replacement/control/private-use/unassigned characters, or mostly
    non-ASCII symbols, mark a malformed skill (its reward is set to 0)."""
    if not text.strip():
        return True
    odd = 0
    for ch in text:
        if ch in "\n\t\r":
            continue
        cat = unicodedata.category(ch)
        if ch == "\ufffd" or cat in ("Cc", "Co", "Cs", "Cn"):
            return True
        if ord(ch) > 127 and not cat.startswith("L"):
            odd += 1
    return odd / len(text) > max_non_ascii


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def ordering_probability(delta: float, sigma: float) -> float:
    """Eq. 8: Pr(R̂_a > R̂_b | R_a > R_b) ≈ Φ(Δ_ab / σ_ab)."""
    if sigma <= 0:
        return 1.0 if delta > 0 else 0.5
    return normal_cdf(delta / sigma)


def gap_sigma(var_a: Sequence[float], var_b: Sequence[float]) -> float:
    """Eq. 7: σ_ab = sqrt((1/K²) Σ_i (v_ai + v_bi))."""
    k = len(var_a)
    return math.sqrt(sum(a + b for a, b in zip(var_a, var_b)) / (k * k)) if k else 0.0


def ordering_lower_bound(delta: float, k: int, reward_range: float = 1.0) -> float:
    """Eq. 10: Pr ≳ Φ(Δ_ab·√(2K) / (M − m)), from the bound σ²_ab ≤ (M − m)²/(2K) (Eq. 9)."""
    return normal_cdf(delta * math.sqrt(2 * k) / reward_range)


def group_reliability(r: Sequence[Sequence[float]], reward_range: float = 1.0) -> dict[str, float]:
    """Per extractor group: the spread of skill rewards, and the mean Eq. 10 bound over adjacent-ranked skill pairs."""
    rewards = sorted(skill_rewards(r), reverse=True)
    k = len(r[0]) if r else 0
    pairs = [rewards[i] - rewards[i + 1] for i in range(len(rewards) - 1)]
    bounds = [ordering_lower_bound(d, k, reward_range) for d in pairs] if k else []
    return {
        "spread": (rewards[0] - rewards[-1]) if rewards else 0.0,
        "ordering_bound": sum(bounds) / len(bounds) if bounds else 0.0,
    }


def joint_weights(mode: str, lambda_e: float, lambda_s: float) -> tuple[float, float]:
    """Eq. 6 weights for Table 3's ablations: both, solver_only (λ_e = 0), extractor_only (λ_s = 0)."""
    if mode == "solver_only":
        return 0.0, lambda_s
    if mode == "extractor_only":
        return lambda_e, 0.0
    return lambda_e, lambda_s
