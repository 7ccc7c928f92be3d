"""The four pluggable stages of the master loop (AgentEvolver §6.1) and their baseline implementations.

(A) task supply → (B) rollouts → (C) experience summarisation → (D) sample construction and update.
Self-questioning replaces (A), self-navigating (B)+(C), self-attributing the sample builder of (D); the loop in
``loop.py`` only sees these protocols. Every stage returns its metrics as a flat ``dict[str, float]``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence, runtime_checkable

from evolvekit.agent.rollout import RolloutJob, run_rollouts
from evolvekit.agent.templates import TemplateSettings
from evolvekit.config import Config
from evolvekit.env.base import Environment
from evolvekit.llm.base import LLM, SamplingParams
from evolvekit.store.sqlite import RunStore
from evolvekit.train.samples import build_samples, grpo_step_advantages
from evolvekit.types import Task, TrainingSample, Trajectory


@dataclass(frozen=True)
class IterationContext:
    iteration: int
    seed: int
    run_dir: Path
    store: RunStore


@runtime_checkable
class TaskSupply(Protocol):
    def tasks(self, ctx: IterationContext) -> list[Task]: ...

    def training_set(self) -> list[Task]:
        """p_train: every task this supply may draw from (the cold-start experience pool samples it, Eq. 13)."""
        ...

    def observe(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]: ...


@runtime_checkable
class RolloutStage(Protocol):
    def rollout(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]: ...


@runtime_checkable
class ExperienceStage(Protocol):
    def process(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]: ...


@runtime_checkable
class SampleStage(Protocol):
    def build(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> tuple[list[TrainingSample], dict[str, float]]: ...


@runtime_checkable
class UpdateStage(Protocol):
    def update(self, ctx: IterationContext, samples: Sequence[TrainingSample]) -> dict[str, float]: ...

    def save(self, path: Path) -> Path: ...


# -- baselines -------------------------------------------------------------------------------------------------


class FixedTaskSupply:
    """(A) baseline: real tasks of the training split, ``per_iteration`` per iteration, reshuffled every epoch.

    The order depends only on the seed and the iteration number, so a resumed run draws the same tasks.
    """

    def __init__(self, tasks: Sequence[Task], per_iteration: int, seed: int) -> None:
        if not tasks:
            raise ValueError("the task supply has no tasks")
        self.pool = list(tasks)
        self.per_iteration = per_iteration
        self.seed = seed

    def training_set(self) -> list[Task]:
        return list(self.pool)

    def tasks(self, ctx: IterationContext) -> list[Task]:
        n = len(self.pool)
        out = []
        for k in range(ctx.iteration * self.per_iteration, (ctx.iteration + 1) * self.per_iteration):
            epoch, pos = divmod(k, n)
            order = list(range(n))
            random.Random(self.seed * 100_003 + epoch).shuffle(order)
            out.append(self.pool[order[pos]])
        return out

    def observe(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        return {}


class VanillaRollouts:
    """(B) baseline: ``group_size`` rollouts per task with the current policy; one GRPO group per task."""

    def __init__(self, llm: LLM, make_env: Callable[[], Environment], cfg: Config, params: SamplingParams,
                 show_progress: bool = True, template: TemplateSettings | None = None) -> None:
        self.llm, self.make_env, self.cfg, self.params = llm, make_env, cfg, params
        self.show_progress = show_progress
        self.template = template  # the context template with its summariser (None: cfg.rollout's, no summariser)
        self.pool = None
        if cfg.rollout.backend == "ray":
            from evolvekit.agent.ray_backend import RayRolloutPool

            self.pool = RayRolloutPool(cfg)

    def rollout(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]:
        jobs = []
        for i, task in enumerate(tasks):
            group = f"it{ctx.iteration:04d}-g{i:03d}-{task.task_id}"
            jobs += [RolloutJob(task=task, group_id=group) for _ in range(self.cfg.rollout.group_size)]
        params = SamplingParams(n=1, temperature=self.params.temperature, top_p=self.params.top_p,
                                max_new_tokens=self.params.max_new_tokens, stop=self.params.stop, seed=ctx.seed)
        return self.run_jobs(jobs, params)

    def run_jobs(self, jobs: Sequence[RolloutJob], params: SamplingParams) -> list[Trajectory]:
        """Run rollout jobs where ``rollout.backend`` says: on the Ray workers (synced to the current policy), or here."""
        if self.pool is not None:
            if getattr(self.llm, "model", None) is not None:
                self.pool.sync_weights(self.llm.model)  # workers roll out the policy being trained
            return self.pool.run(jobs, params)
        return run_rollouts(jobs, self.make_env, self.llm, self.cfg.rollout, params, self.cfg.env.tool_rendering,
                            show_progress=self.show_progress, template=self.template)


class NoExperience:
    """(C) baseline: plain GRPO keeps no experience."""

    def process(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        return {}


class GRPOSamples:
    """(D, first half) baseline: outcome reward, Eq. 16 group advantages, broadcast to every policy token.

    Subclasses change only ``step_advantages`` (self-attributing does); every sample builder shares the rest:
    the hybrid proxy-task advantage decay (§3.3), experience stripping (§4.3) and the length cap.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def step_advantages(self, ctx: IterationContext, live: Sequence[Trajectory]
                        ) -> tuple[list[dict[int, float]], dict[str, float]]:
        """Advantage of every step of every live trajectory (here: Eq. 16, the same for all steps)."""
        return grpo_step_advantages(live, self.cfg.train.eps_norm), {}

    def build(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> tuple[list[TrainingSample], dict[str, float]]:
        live = [t for t in trajectories if not t.flags.failed]
        adv, metrics = self.step_advantages(ctx, live)
        scale = None
        q = self.cfg.questioning
        if q.enabled and q.hybrid_lambda < 1.0:  # hybrid training: proxy-task advantages are down-weighted
            from evolvekit.questioning.supply import synthetic_advantage_scale

            scale = synthetic_advantage_scale({t.task_id: t for t in ctx.store.tasks()}, q.synthetic_advantage_decay)
        samples, st = build_samples(live, adv, strip_experience=self.cfg.navigating.strip_experience,
                                    max_tokens=self.cfg.train.max_sequence_tokens, advantage_scale=scale)
        groups: dict[str, list[float]] = {}
        for t in live:
            groups.setdefault(t.group_id or t.trajectory_id, []).append(float(t.outcome_reward or 0.0))
        degenerate = sum(1 for r in groups.values() if len(set(r)) < 2)
        metrics.update({"samples/count": st.samples, "samples/skipped_too_long": st.skipped_too_long,
                        "samples/skipped_failed": len(trajectories) - len(live),
                        "samples/groups": len(groups), "samples/degenerate_groups": degenerate})
        return samples, metrics


class TrainerUpdate:
    """(D, second half): the GRPO trainer's update, and its checkpoints."""

    def __init__(self, trainer) -> None:
        self.trainer = trainer

    def update(self, ctx: IterationContext, samples: Sequence[TrainingSample]) -> dict[str, float]:
        return self.trainer.update(samples).as_metrics()

    def save(self, path: Path) -> Path:
        return self.trainer.save(path)
