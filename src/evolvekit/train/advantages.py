"""Advantage estimators, registered by name (veRL's ``register_adv_est`` style).

An estimator is one pure function ``(AdvantageBatch) -> (step advantages, metrics)``: for every live trajectory of
an iteration, the advantage of each of its steps (by step index), which the sample builder then spreads over the
step's tokens (``train/samples.py``). A new algorithm is one function, one ``@register_advantage("name")`` and one
config value (``train.advantage_estimator: name``); a module that registers one is imported through
``env.plugins`` like an environment plugin.

Built in:
- ``grpo``: GRPO's group-normalised outcome (Eq. 16), the same for every step (here);
- ``dual_channel``: self-attributing's outcome and attribution channels (Eq. 18-21, ``attributing/credit.py``);
- ``gigpo``: GiGPO's episode and anchor-state step groups (``attributing/gigpo.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from evolvekit.config import AttributingConfig
from evolvekit.registry import registrar
from evolvekit.train.samples import grpo_step_advantages
from evolvekit.types import StepLabel, Trajectory

StepAdvantages = tuple[list[dict[int, float]], dict[str, float]]


@dataclass(frozen=True)
class AdvantageBatch:
    """What every estimator receives: the iteration's live trajectories, the step labels of the run's step-credit
    source (one entry per trajectory; None where it has none, or everywhere without a source), the iteration, and
    the settings estimators read."""

    trajectories: Sequence[Trajectory]
    labels: Sequence[list[StepLabel] | None]
    iteration: int
    eps_norm: float
    attributing: AttributingConfig

    def groups(self) -> list[list[int]]:
        """Indices of the trajectories of each GRPO group, in first-seen order."""
        out: dict[str, list[int]] = {}
        for i, t in enumerate(self.trajectories):
            out.setdefault(t.group_id or t.trajectory_id, []).append(i)
        return list(out.values())


AdvantageFn = Callable[[AdvantageBatch], StepAdvantages]

ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an advantage estimator under ``name`` (a second registration of a name is refused)."""
    return registrar(ADVANTAGE_ESTIMATORS, "advantage estimator", name)


def get_advantage(name: str) -> AdvantageFn:
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        known = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise ValueError(f"unknown advantage estimator '{name}' (registered: {known})") from None


@register_advantage("grpo")
def grpo_advantages(batch: AdvantageBatch) -> StepAdvantages:
    """Eq. 16: each trajectory's group-normalised outcome, for every one of its steps; step labels are not read."""
    return grpo_step_advantages(batch.trajectories, batch.eps_norm), {}
