"""Stage (B)'s baseline: ``group_size`` rollouts per task with the current policy (plain GRPO's rollouts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from evolvekit.agent.rollout import RolloutJob, require_a_valid_episode, run_rollouts
from evolvekit.agent.templates import TemplateSettings
from evolvekit.config import Config, RolloutConfig
from evolvekit.engine.base import Engine
from evolvekit.env.base import Environment
from evolvekit.llm.base import SamplingParams
from evolvekit.protocols import IterationContext
from evolvekit.types import Task, Trajectory

if TYPE_CHECKING:
    from evolvekit.agent.ray_backend import RayRolloutPool


@dataclass(frozen=True)
class RolloutSettings:
    """What rollouts read of the config, gathered by the composition (``of``): the rollout section and the
    environment's tool rendering."""

    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rendering: str = "compact"

    @classmethod
    def of(cls, cfg: Config) -> RolloutSettings:
        return cls(rollout=cfg.rollout, rendering=cfg.env.tool_rendering)


class VanillaRollouts:
    """(B) baseline: ``group_size`` rollouts per task with the current policy; one GRPO group per task."""

    def __init__(
        self,
        engine: Engine,
        make_env: Callable[[], Environment],
        settings: RolloutSettings,
        params: SamplingParams,
        show_progress: bool = True,
        template: TemplateSettings | None = None,
        pool: RayRolloutPool | None = None,
    ) -> None:
        self.engine = engine  # the trained policy's engine, built once by the composition (its capabilities found)
        self.llm, self.make_env, self.settings, self.params = engine.llm, make_env, settings, params
        self.show_progress = show_progress
        self.template = template  # the context template with its summariser (None: the rollout section's)
        self.pool = pool  # Ray workers (rollout.backend: ray), built by the composition; None: here
        self.last_metrics: dict[str, float] = {}

    def rollout(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]:
        jobs = []
        for i, task in enumerate(tasks):
            group = f"it{ctx.iteration:04d}-g{i:03d}-{task.task_id}"
            jobs += [RolloutJob(task=task, group_id=group) for _ in range(self.settings.rollout.group_size)]
        params = self.sampling(ctx.seed)
        return self.run_jobs(jobs, params)

    def sampling(self, seed: int) -> SamplingParams:
        """The policy's sampling settings, one sample per job, with this iteration's seed."""
        p = self.params
        return SamplingParams(
            n=1, temperature=p.temperature, top_p=p.top_p, max_new_tokens=p.max_new_tokens, stop=p.stop, seed=seed
        )

    def run_jobs(self, jobs: Sequence[RolloutJob], params: SamplingParams) -> list[Trajectory]:
        """Run rollout jobs where ``rollout.backend`` says: on the Ray workers (synced to the current policy), or
        here."""
        if self.pool is not None:
            if self.engine.caps.in_process:
                self.pool.sync_weights(self.engine.model)  # workers roll out the policy being trained
            trajs = self.pool.run(jobs, params)
        else:
            trajs = run_rollouts(
                jobs,
                self.make_env,
                self.engine,
                self.settings.rollout,
                params,
                self.settings.rendering,
                show_progress=self.show_progress,
                template=self.template,
            )
        require_a_valid_episode(trajs, "rollouts")
        return trajs
