"""Evolving-RL's rollout structure and joint samples (Evolving-RL §3.1-3.4), as master-loop stages B, C and D:
``EvolvingRLRollouts`` (B), ``EvolvingRLSkills`` (C) and ``EvolvingRLSamples`` (D's sample builder), three objects
that share nothing but the config; ``evolving_rl_stages`` builds the three together.

Per source task: (1) the policy solves it without a skill; (2) from (task, trajectory, reward) the same policy,
as extractor, samples N candidate skills; (3) K related tasks (by task-description embedding, source included)
are each solved once per skill by the policy as solver. Stage D builds the extractor samples (one GRPO group of
N per source, reward = mean downstream reward, malformed skills zeroed, weight λ_e, entropy coefficient η_e) and
the solver samples (one group of N per downstream task, weight λ_s; the skill stays in context — it is the
condition, not stripped). Every trajectory is stored: extractor generations are one-step trajectories whose
outcome is the skill's reward, so a resumed iteration rebuilds the same samples from the store.
"""

from __future__ import annotations

from typing import Callable, Sequence

from evolvekit.agent.rollout import RolloutJob, run_rollouts
from evolvekit.agent.rollout_stage import RolloutSettings
from evolvekit.config import Config, EvolvingRLConfig
from evolvekit.engine.base import Engine
from evolvekit.llm.base import SamplingParams
from evolvekit.navigating.evolving_rl import (
    abnormal_skill,
    extractor_advantages,
    group_reliability,
    joint_weights,
    solver_advantages,
)
from evolvekit.navigating.extract import render_trajectory
from evolvekit.navigating.utility import related_tasks
from evolvekit.protocols import IterationContext
from evolvekit.train.sample_stage import SampleSettings
from evolvekit.train.samples import build_samples
from evolvekit.types import (
    MAX_EXPERIENCE_CHARS,
    ChatMessage,
    EvolvingRole,
    Experience,
    ExperienceProvenance,
    Step,
    Task,
    TrainingSample,
    Trajectory,
    new_id,
)

EXTRACTOR_SYSTEM = (
    "You turn an agent's attempt at a task into a reusable skill for similar tasks. A skill has two "
    "lines:\nWhen to use: <the situation>\nContent: <concrete procedure and details that make it work>"
)


def extractor_messages(task: Task, traj: Trajectory) -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content=EXTRACTOR_SYSTEM),
        ChatMessage(
            role="user",
            content=f"Task:\n{chr(10).join(task.turns)}\n\nAttempt:\n{render_trajectory(traj)}\n\nWrite one skill.",
        ),
    ]


def _role(t: Trajectory) -> EvolvingRole:
    assert t.evolving is not None  # every trajectory of this stage has its role
    return t.evolving


def _of(trajectories: Sequence[Trajectory], role: str) -> list[Trajectory]:
    return [t for t in trajectories if t.evolving is not None and t.evolving.role == role]


class EvolvingRLRollouts:
    """(B): per source task, its solution, N candidate skills and each skill's K downstream solutions."""

    def __init__(
        self,
        evolving: EvolvingRLConfig,
        rollout: RolloutSettings,
        engine: Engine,
        make_env: Callable,
        params: SamplingParams,
        candidates: Callable[[], Sequence[Task]],
        embed,
        template=None,
    ) -> None:
        self.evolving, self.settings = evolving, rollout
        self.engine, self.make_env, self.params = engine, make_env, params  # the policy's rollout engine
        self.template = template  # the context template with its summariser
        # the related-task pool, read once when first needed (after the loop's synthesis stage)
        self.candidate_source, self.embed = candidates, embed
        self._candidates: list[Task] | None = None
        self.last_metrics: dict[str, float] = {}

    def candidates(self) -> list[Task]:
        if self._candidates is None:
            self._candidates = list(self.candidate_source())
        return self._candidates

    def _params(self, seed: int) -> SamplingParams:
        return SamplingParams(
            n=1,
            temperature=self.params.temperature,
            top_p=self.params.top_p,
            max_new_tokens=self.params.max_new_tokens,
            stop=self.params.stop,
            seed=seed,
        )

    # -- (B) ---------------------------------------------------------------------------------------------------------
    def rollout(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]:
        e = self.evolving
        rc = self.settings.rollout
        sources = run_rollouts(
            [RolloutJob(task=t, group_id=f"it{ctx.iteration:04d}-src-{i}") for i, t in enumerate(tasks)],
            self.make_env,
            self.engine,
            rc,
            self._params(ctx.seed),
            self.settings.rendering,
            False,
            template=self.template,
        )
        out: list[Trajectory] = []
        for i, (task, src) in enumerate(zip(tasks, sources)):
            src.evolving = EvolvingRole(role="source", source=i)
            out.append(src)
            prompt = self.engine.apply_chat_template(extractor_messages(task, src))
            comps = self.engine.generate_ids(
                [prompt],
                SamplingParams(
                    n=e.n_candidates, temperature=1.0, max_new_tokens=e.skill_max_tokens, seed=ctx.seed + 1000 + i
                ),
            )[0]
            related = related_tasks(task, self.candidates(), self.embed, e.k_tasks)
            jobs = []
            ext_trajs = []
            for s, comp in enumerate(comps):
                ext = Trajectory(
                    task_id=task.task_id,
                    group_id=f"it{ctx.iteration:04d}-ext-{i}",
                    steps=[
                        Step(
                            index=0,
                            action_text=comp.text,
                            prompt_token_ids=prompt,
                            completion_token_ids=comp.token_ids,
                            completion_logprobs=comp.logprobs,
                        )
                    ],
                    evolving=EvolvingRole(
                        role="extractor",
                        source=i,
                        skill=s,
                        abnormal=abnormal_skill(comp.text),
                        related=[t.task_id for t in related],
                    ),
                )
                ext_trajs.append(ext)
                jobs += [
                    RolloutJob(task=t, group_id=f"it{ctx.iteration:04d}-sol-{i}-{j}", experience=comp.text)
                    for j, t in enumerate(related)
                ]
            solved = run_rollouts(
                jobs,
                self.make_env,
                self.engine,
                rc,
                self._params(ctx.seed + 2000 + i),
                self.settings.rendering,
                False,
                template=self.template,
            )
            for n, traj in enumerate(solved):
                s, j = divmod(n, len(related))
                traj.evolving = EvolvingRole(role="solver", source=i, skill=s, task_index=j)
            for s, ext in enumerate(ext_trajs):  # Eq. 2: the skill's reward is its mean downstream reward
                rewards = [float(t.outcome_reward or 0.0) for t in solved if _role(t).skill == s]
                utility = 0.0 if _role(ext).abnormal else sum(rewards) / max(1, len(rewards))
                ext.rewards = ext.rewards.model_copy(update={"skill_utility": utility})  # R_out (train/rewards.py)
            out += ext_trajs + solved
        return out


class EvolvingRLSkills:
    """(C): the best valid skill of each source joins the experience pool, committed with the iteration."""

    def __init__(self) -> None:
        self.skills: list[Experience] = []

    def process(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """The best valid skill of each source joins the experience pool with its measured utility."""
        self.skills = []
        for src in sorted({_role(t).source for t in _of(trajectories, "extractor")}):
            exts = [t for t in _of(trajectories, "extractor") if _role(t).source == src and not _role(t).abnormal]
            if not exts:
                continue
            best = max(exts, key=lambda t: float(t.outcome_reward or 0.0))
            text = best.steps[0].action_text.strip()
            when, _, content = text.partition("Content:")
            self.skills.append(
                Experience(
                    experience_id=new_id("skill"),
                    when_to_use=(when.replace("When to use:", "").strip() or text[:200])[:MAX_EXPERIENCE_CHARS],
                    content=(content.strip() or text)[:MAX_EXPERIENCE_CHARS],
                    utility=float(best.outcome_reward or 0.0),
                    provenance=ExperienceProvenance(
                        kind="skill",
                        trajectory_ids=[best.trajectory_id],
                        task_ids=[best.task_id],
                        iteration=ctx.iteration,
                    ),
                )
            )
        return {"evolving/skills_kept": float(len(self.skills))}

    def commit(self, c, store, iteration: int) -> None:
        store.put_experiences(c, self.skills, iteration)


class EvolvingRLSamples:
    """(D): the extractor's and the solver's GRPO groups, weighted by λ_e and λ_s (Eq. 6)."""

    def __init__(self, evolving: EvolvingRLConfig, samples: SampleSettings) -> None:
        self.evolving, self.settings = evolving, samples

    def build(
        self, ctx: IterationContext, trajectories: Sequence[Trajectory]
    ) -> tuple[list[TrainingSample], dict[str, float]]:
        e = self.evolving
        w_e, w_s = joint_weights(e.mode, e.lambda_e, e.lambda_s)
        samples: list[TrainingSample] = []
        spreads, bounds, abnormal = [], [], 0
        ext_rewards = [float(t.outcome_reward or 0.0) for t in _of(trajectories, "extractor")]
        sol_rewards = [float(t.outcome_reward or 0.0) for t in _of(trajectories, "solver")]
        sources = sorted({_role(t).source for t in _of(trajectories, "extractor")})
        for src in sources:
            exts = sorted(
                [t for t in _of(trajectories, "extractor") if _role(t).source == src], key=lambda t: _role(t).skill or 0
            )
            sols = [t for t in _of(trajectories, "solver") if _role(t).source == src]
            k = max((_role(t).task_index or 0 for t in sols), default=-1) + 1
            r = [[0.0] * k for _ in exts]
            for t in sols:
                r[_role(t).skill or 0][_role(t).task_index or 0] = float(t.outcome_reward or 0.0)
            valid = [not _role(t).abnormal for t in exts]
            abnormal += valid.count(False)
            rel = group_reliability(r)
            spreads.append(rel["spread"])
            bounds.append(rel["ordering_bound"])
            if w_e > 0:
                adv_e = extractor_advantages(r, valid, self.settings.eps_norm)
                built, _ = build_samples(
                    exts, [{0: a} for a in adv_e], strip_experience=False, max_tokens=self.settings.max_sequence_tokens
                )
                samples += [
                    s.model_copy(update={"loss_weight": w_e, "entropy_coef": e.entropy_coef, "loss_group": "extractor"})
                    for s in built
                ]
            if w_s > 0 and sols:
                adv_s = solver_advantages(r, self.settings.eps_norm)
                step_adv = [
                    {st.index: adv_s[_role(t).skill or 0][_role(t).task_index or 0] for st in t.steps} for t in sols
                ]
                built, _ = build_samples(
                    sols, step_adv, strip_experience=False, max_tokens=self.settings.max_sequence_tokens
                )
                samples += [
                    s.model_copy(update={"loss_weight": w_s, "experience_guided": False, "loss_group": "solver"})
                    for s in built
                ]
        n = len(sources) or 1
        return samples, {
            "evolving/extractor_reward": sum(ext_rewards) / max(1, len(ext_rewards)),
            "evolving/solver_reward": sum(sol_rewards) / max(1, len(sol_rewards)),
            "evolving/sources": float(len(sources)),
            "evolving/skill_reward_spread": sum(spreads) / n,
            "evolving/ordering_bound": sum(bounds) / n,
            "evolving/abnormal_skills": float(abnormal),
            "evolving/samples": float(len(samples)),
        }


def evolving_rl_stages(
    cfg: Config,
    engine: Engine,
    make_env: Callable,
    params: SamplingParams,
    candidates: Callable[[], Sequence[Task]],
    embed,
    template=None,
) -> tuple[EvolvingRLRollouts, EvolvingRLSkills, EvolvingRLSamples]:
    """Evolving-RL's stages B, C and D(samples), which replace the loop's rollouts, experience and sample stages."""
    rollout = RolloutSettings.of(cfg)
    return (
        EvolvingRLRollouts(cfg.evolving_rl, rollout, engine, make_env, params, candidates, embed, template),
        EvolvingRLSkills(),
        EvolvingRLSamples(cfg.evolving_rl, SampleSettings.of(cfg)),
    )
