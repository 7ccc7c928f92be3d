"""Stage D with self-attributing: LLM step labels → Eq. 18-21 step advantages → token advantages (§5.4)."""

from __future__ import annotations

from typing import Sequence

from evolvekit.attributing.attributor import StepAttributor
from evolvekit.attributing.credit import group_step_advantages
from evolvekit.config import Config
from evolvekit.orchestrator.stages import IterationContext
from evolvekit.train.samples import build_samples
from evolvekit.types import TrainingSample, Trajectory


def alpha_for(cfg: Config, iteration: int) -> float:
    """α of Eq. 20 for this iteration: the schedule's entry (its last one past the end), else ``attributing.alpha``."""
    sched = cfg.attributing.alpha_schedule
    if not sched:
        return cfg.attributing.alpha
    return sched[min(iteration, len(sched) - 1)]


class AttributedSamples:
    """Replaces ``GRPOSamples``: the same samples, with step-level advantages from both channels."""

    def __init__(self, cfg: Config, attributor: StepAttributor | None) -> None:
        self.cfg, self.attributor = cfg, attributor

    def build(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> tuple[list[TrainingSample], dict[str, float]]:
        acfg = self.cfg.attributing
        live = [t for t in trajectories if not t.flags.failed]
        metrics: dict[str, float] = {}
        labels: list = [None] * len(live)
        if acfg.mode != "outcome_only" and self.attributor is not None:
            tasks = {t.task_id: t for t in ctx.store.tasks()}
            result = self.attributor.attribute(live, tasks)
            labels = result.labels
            metrics.update(result.metrics())
            for t, lab in zip(live, labels):
                t.step_attributions = lab
                t.flags.attribution_neutralised = lab is None
        alpha = alpha_for(self.cfg, ctx.iteration)
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(live):
            groups.setdefault(t.group_id or t.trajectory_id, []).append(i)
        step_adv: list[dict[int, float]] = [{} for _ in live]
        for idx in groups.values():
            advs = group_step_advantages([labels[i] for i in idx], [float(live[i].outcome_reward or 0.0) for i in idx],
                                         [len(live[i].steps) for i in idx], alpha, acfg.mode, acfg.eps)
            for i, a in zip(idx, advs):
                step_adv[i] = {s.index: a[k] for k, s in enumerate(live[i].steps)}
        samples, st = build_samples(live, step_adv, strip_experience=self.cfg.navigating.strip_experience,
                                    max_tokens=self.cfg.train.max_sequence_tokens)
        metrics.update({"samples/count": st.samples, "samples/skipped_too_long": st.skipped_too_long,
                        "samples/skipped_failed": len(trajectories) - len(live), "samples/groups": len(groups),
                        "attribution/alpha": alpha})
        return samples, metrics
