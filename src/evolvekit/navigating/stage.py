"""Self-navigating stages (AgentEvolver §4): experience-mixed rollouts (B) and experience summarisation (C).

(B) In each group of N rollouts, N_e = ⌊η·N⌋ are experience-guided (Eq. 15): the task query retrieves top-k
experiences (Eq. 14), refined by optional LLM re-ranking and re-writing, injected through the context manager as
a recorded span (``{system}<EXP>{exp}</EXP>{query}``). Advantages are standardised over the whole mixed group by the
sample stage (Eq. 16); the experience tokens are stripped before the update and positive-advantage guided samples
get ε̂_high (§4.3, in the trainer).
(C) Uses and successes of the experiences that guided a rollout are counted; new experiences are extracted
from this iteration's trajectories, validated, and added or merged (EvolveR); a sweep prunes low scores.
"""

from __future__ import annotations

import math
import random
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from evolvekit.agent.rollout import RolloutJob
from evolvekit.agent.rollout_stage import RolloutSettings, VanillaRollouts
from evolvekit.config import Config, NavigatingConfig
from evolvekit.engine.base import Engine
from evolvekit.llm.base import LLM, SamplingParams
from evolvekit.navigating.extract import ExperienceExtractor, refine
from evolvekit.navigating.pool import ExperiencePool
from evolvekit.protocols import IterationContext
from evolvekit.store.sqlite import RunStore
from evolvekit.types import Task, Trajectory

if TYPE_CHECKING:
    from evolvekit.agent.ray_backend import RayRolloutPool
    from evolvekit.navigating.utility import UtilityTester


def guided_count(group_size: int, eta: float) -> int:
    """Eq. 15: N_e = ⌊η·N⌋."""
    return int(math.floor(eta * group_size + 1e-9))


class NoExperience:
    """(C) baseline: plain GRPO keeps no experience."""

    def process(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        return {}

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        return None


@dataclass(frozen=True)
class NavigationSettings:
    """What self-navigating's stages read of the config, gathered by the composition (``of``): its own section, and
    the few values of other sections it needs, resolved (the group size, the cold start's task count, the run's seed,
    the success threshold)."""

    navigating: NavigatingConfig = field(default_factory=NavigatingConfig)
    group_size: int = 8
    cold_start_tasks: int = 4  # navigating.cold_start_tasks, or one iteration's batch when that is 0
    seed: int = 0
    success_threshold: float = 1.0

    @classmethod
    def of(cls, cfg: Config) -> NavigationSettings:
        return cls(
            navigating=cfg.navigating,
            group_size=cfg.rollout.group_size,
            cold_start_tasks=cfg.navigating.cold_start_tasks or cfg.train.tasks_per_iteration,
            seed=cfg.run.seed,
            success_threshold=cfg.reward.success_threshold,
        )


class ExperienceMixedRollouts(VanillaRollouts):
    def __init__(
        self,
        engine: Engine,
        make_env,
        rollout: RolloutSettings,
        nav: NavigationSettings,
        params: SamplingParams,
        pool: ExperiencePool,
        refiner: LLM | None,
        refine_params: SamplingParams,
        show_progress: bool = True,
        training_set: Callable[[], Sequence[Task]] | None = None,
        template=None,
        cold_extractor: ExperienceExtractor | None = None,
        workers: RayRolloutPool | None = None,
    ) -> None:
        super().__init__(engine, make_env, rollout, params, show_progress, template, workers)
        self.nav = nav
        self.experiences, self.refiner, self.refine_params = pool, refiner, refine_params
        # p_train, which the cold-start pool samples (Eq. 13): read once, when first needed, after the loop's
        # synthesis stage has made the synthetic tasks (tasks CoEvolve adds later are not part of it)
        self.training_set = training_set
        self._p_train: list[Task] | None = None
        self.cold_metrics: dict[str, float] = {}
        self.cold_extractor = cold_extractor  # writes the cold-start pool (Eq. 13); None: no cold start

    def _experience_for(self, task: Task) -> tuple[str | None, tuple[str, ...]]:
        ncfg = self.nav.navigating
        query = "\n".join(task.turns)
        hits = self.experiences.retrieve(query, ncfg.top_k)
        if not hits:
            return None, ()
        chosen = refine(
            self.refiner,
            self.refine_params,
            query,
            [e for e, _ in hits],
            ncfg.rerank,
            ncfg.rewrite,
            keep=ncfg.inject_count,
        )
        # credit what was injected (after re-ranking), not the top cosine hits
        return "\n\n".join(text for _, text in chosen), tuple(e.experience_id for e, _ in chosen)

    def cold_start_tasks(self, seed: int, fallback: Sequence[Task]) -> list[Task]:
        """Eq. 13's tasks g ~ p_train: ``navigating.cold_start_tasks`` of them (0 = one iteration's batch), drawn
        without replacement from the whole training set with the run's seed (``fallback``: this iteration's tasks,
        when no training set was given)."""
        if self._p_train is None:
            self._p_train = list(self.training_set()) if self.training_set is not None else []
        pool = self._p_train or list(fallback)
        n = self.nav.cold_start_tasks
        return random.Random(seed).sample(pool, min(n, len(pool)))

    def cold_start(self, ctx: IterationContext, tasks: Sequence[Task]) -> int:
        """Eq. 13: with an empty pool, N_pc vanilla rollouts of the initial policy on tasks sampled from p_train
        feed Ω_process."""
        n_pc = self.nav.navigating.n_pc
        if len(self.experiences) or not n_pc or self.cold_extractor is None:
            return 0
        chosen = self.cold_start_tasks(self.nav.seed * 7919 + 13, tasks)
        jobs = [
            RolloutJob(task=t, group_id=f"coldstart-{i}-{t.task_id}") for i, t in enumerate(chosen) for _ in range(n_pc)
        ]
        trajs = self.run_jobs(jobs, self.sampling(ctx.seed + 7))
        report = self.cold_extractor.extract(trajs, {t.task_id: t for t in chosen}, ctx.iteration)
        for exp in report.experiences:
            self.experiences.add(exp)
        self.cold_metrics = {
            "navigating/cold_start_extraction_jobs": float(report.jobs),
            "navigating/cold_start_validated_share": report.validated_share,
            "navigating/cold_start_experiences": float(len(report.experiences)),
        }
        return len(trajs)

    def guided_per_group(self) -> int:
        """Eq. 15's N_e guided rollouts of each group; none with as_tool, where the agent's own search_experience
        calls replace prompt injection (EvolveR §3.2.2), so neither injection nor the boost of guided samples runs."""
        return 0 if self.nav.navigating.as_tool else guided_count(self.nav.group_size, self.nav.navigating.eta)

    def rollout(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]:
        self.cold_metrics = {}
        cold = self.cold_start(ctx, tasks)
        n = self.nav.group_size
        n_e = self.guided_per_group()
        jobs = []
        for i, task in enumerate(tasks):
            group = f"it{ctx.iteration:04d}-g{i:03d}-{task.task_id}"
            exp, ids = self._experience_for(task) if n_e else (None, ())
            jobs += [
                RolloutJob(
                    task=task,
                    group_id=group,
                    experience=exp if j < n_e else None,
                    experience_ids=ids if j < n_e else (),
                )
                for j in range(n)
            ]
        params = self.sampling(ctx.seed)
        trajs = self.run_jobs(jobs, params)  # rollout.backend honoured (Ray workers or here)
        self.last_metrics = {
            "navigating/cold_start_rollouts": float(cold),
            **self.cold_metrics,
        }
        return trajs


def guided_vs_vanilla(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    g = [float(t.outcome_reward or 0.0) for t in trajectories if t.flags.experience_guided]
    v = [float(t.outcome_reward or 0.0) for t in trajectories if not t.flags.experience_guided]
    out = {"navigating/guided_rollouts": float(len(g)), "navigating/vanilla_rollouts": float(len(v))}
    # tasks that had an experience retrieved: their groups hold guided rollouts (from the trajectories themselves, so
    # an iteration resumed from its committed rollouts reports it too; issue 52)
    out["navigating/retrievals"] = float(len({t.group_id for t in trajectories if t.flags.experience_guided}))
    if g:
        out["navigating/guided_reward"] = sum(g) / len(g)
    if v:
        out["navigating/vanilla_reward"] = sum(v) / len(v)
    return out


class ExperienceSummarisation:
    """(C): count uses/successes, extract + validate + add/merge, prune; committed with the iteration."""

    def __init__(
        self,
        nav: NavigationSettings,
        pool: ExperiencePool,
        extractor: ExperienceExtractor,
        utility: UtilityTester | None = None,
    ) -> None:
        self.nav, self.pool, self.extractor = nav, pool, extractor
        self._pruned: list[str] = []
        self.utility = utility  # Evolving-RL's utility test when navigating.utility_test

    def process(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        ncfg = self.nav.navigating
        metrics = guided_vs_vanilla(trajectories)
        for t in trajectories:
            if t.experience_used and not t.flags.failed:
                self.pool.record_use(t.experience_used, t.succeeded(self.nav.success_threshold))
        self._pruned = []
        if not ncfg.online_extraction:  # AgentEvolver §4.1: the pool was built offline (Eq. 13); online, retrieval only
            metrics["navigating/pool_size"] = float(len(self.pool))
            return metrics
        tasks = ctx.store.task_index()
        report = self.extractor.extract(trajectories, tasks, ctx.iteration)
        candidates = report.experiences
        dropped = 0
        if self.utility is not None and candidates:  # Evolving-RL: keep only experiences that raise reward
            tested = self.utility.test(candidates, tasks, list(tasks.values()), trajectories)
            candidates = [e for e, _, keep in tested if keep]
            dropped = len(tested) - len(candidates)
        added = merged = 0
        for exp in candidates:
            res = self.pool.add(exp)
            added += res.action == "added"
            merged += res.action == "merged"
        self._pruned = []
        if ncfg.prune_every and (ctx.iteration + 1) % ncfg.prune_every == 0:
            self._pruned = self.pool.prune(ncfg.theta_prune, ncfg.min_uses_before_prune)
        metrics.update(
            {
                "navigating/pool_size": float(len(self.pool)),
                "navigating/added": float(added),
                "navigating/merged": float(merged),
                "navigating/pruned": float(len(self._pruned)),
                "navigating/extraction_calls": float(report.calls),
                "navigating/extraction_prompt_tokens": float(report.prompt_tokens),
                "navigating/extraction_completion_tokens": float(report.completion_tokens),
                "navigating/unparseable": float(report.unparseable),
                "navigating/extraction_jobs": float(report.jobs),
                "navigating/validated_share": report.validated_share,
                "navigating/grounded_experiences": float(report.grounded),
                "navigating/closed_failures": float(report.closed_failures),
                "navigating/rejected": float(report.rejected),
                "navigating/utility_dropped": float(dropped),
            }
        )
        return metrics

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        """Persist the pool in the iteration's final transaction (resume restores it)."""
        store.delete_experiences(c, self._pruned)
        store.put_experiences(c, self.pool.items, iteration, self.pool.vectors)
