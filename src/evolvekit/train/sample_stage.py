"""Stage (D)'s sample builder baseline: GRPO's outcome advantages (Eq. 16) broadcast to every policy token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from evolvekit.config import AttributingConfig, Config, advantage_estimator
from evolvekit.protocols import IterationContext
from evolvekit.train.advantages import AdvantageBatch, get_advantage
from evolvekit.train.samples import build_samples
from evolvekit.types import TrainingSample, Trajectory

# given the iteration, a per-trajectory multiplier of its advantages (None: no scaling this iteration)
AdvantageScale = Callable[[IterationContext], Callable[[Trajectory], float] | None]


@dataclass(frozen=True)
class SampleSettings:
    """What a sample builder reads of the config, gathered by the composition (``of``) so the stage itself reads no
    other section: experience stripping is navigating's setting (§4.3), the length cap and ε_norm are training's."""

    strip_experience: bool = True
    max_sequence_tokens: int = 4096
    eps_norm: float = 1e-6
    estimator: str = "grpo"  # a registered advantage estimator (train/advantages.py)
    attributing: AttributingConfig = field(default_factory=AttributingConfig)  # what its estimators read

    @classmethod
    def of(cls, cfg: Config) -> SampleSettings:
        return cls(
            strip_experience=cfg.navigating.strip_experience,
            max_sequence_tokens=cfg.train.max_sequence_tokens,
            eps_norm=cfg.train.eps_norm,
            estimator=advantage_estimator(cfg),
            attributing=cfg.attributing,
        )


class GRPOSamples:
    """(D, first half) baseline: outcome reward, Eq. 16 group advantages, broadcast to every policy token.

    Subclasses change only ``step_advantages`` (self-attributing does); every sample builder shares the rest:
    experience stripping (§4.3), the length cap, and a per-trajectory advantage scale when one is given
    (``advantage_scale``: self-questioning's hybrid proxy-task decay, §3.3, questioning/supply.py).
    """

    def __init__(self, settings: SampleSettings, advantage_scale: AdvantageScale | None = None) -> None:
        self.settings = settings
        self.advantage_scale = advantage_scale
        self.estimator = get_advantage(settings.estimator)  # found once; an unknown name is refused here

    @classmethod
    def from_config(cls, cfg: Config, advantage_scale: AdvantageScale | None = None) -> GRPOSamples:
        return cls(SampleSettings.of(cfg), advantage_scale)

    def step_advantages(
        self, ctx: IterationContext, live: Sequence[Trajectory]
    ) -> tuple[list[dict[int, float]], dict[str, float]]:
        """Advantage of every step of every live trajectory, by the configured estimator (no step labels here)."""
        return self.estimator(self.batch(ctx, live, [None] * len(live)))

    def batch(self, ctx: IterationContext, live: Sequence[Trajectory], labels: Sequence) -> AdvantageBatch:
        s = self.settings
        return AdvantageBatch(live, labels, ctx.iteration, s.eps_norm, s.attributing)

    def build(
        self, ctx: IterationContext, trajectories: Sequence[Trajectory]
    ) -> tuple[list[TrainingSample], dict[str, float]]:
        live = [t for t in trajectories if not t.flags.failed]
        adv, metrics = self.step_advantages(ctx, live)
        scale = self.advantage_scale(ctx) if self.advantage_scale is not None else None
        samples, st = build_samples(
            live,
            adv,
            strip_experience=self.settings.strip_experience,
            max_tokens=self.settings.max_sequence_tokens,
            advantage_scale=scale,
        )
        groups: dict[str, list[float]] = {}
        for t in live:
            groups.setdefault(t.group_id or t.trajectory_id, []).append(float(t.outcome_reward or 0.0))
        degenerate = sum(1 for r in groups.values() if len(set(r)) < 2)
        metrics.update(
            {
                "samples/count": st.samples,
                "samples/skipped_too_long": st.skipped_too_long,
                "samples/skipped_failed": len(trajectories) - len(live),
                "samples/groups": len(groups),
                "samples/degenerate_groups": degenerate,
            }
        )
        return samples, metrics
