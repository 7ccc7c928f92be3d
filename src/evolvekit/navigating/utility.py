"""Evolving-RL's test of an experience by its downstream reward (Evolving-RL §3.1, used as a pool filter).

An experience's utility is the mean reward it brings on K related tasks — retrieved by the embedding of the
*task description* (never of the experience), the source task included — each solved once with the experience
injected. It is kept only when that beats the tasks' vanilla mean reward observed in the same iteration.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from evolvekit.agent.rollout import RolloutJob, run_rollouts
from evolvekit.engine.base import Engine
from evolvekit.types import Experience, Task, Trajectory


def related_tasks(
    source: Task, candidates: Sequence[Task], embed: Callable[[Sequence[str]], np.ndarray], k: int
) -> list[Task]:
    """The source task plus the K − 1 candidates whose descriptions are most similar to it."""
    others = [t for t in candidates if t.task_id != source.task_id]
    if k <= 1 or not others:
        return [source]
    vecs = embed(["\n".join(source.turns)] + ["\n".join(t.turns) for t in others])
    sims = vecs[1:] @ vecs[0]
    order = np.argsort(-sims)[: k - 1]
    return [source] + [others[i] for i in order]


def experience_text(e: Experience) -> str:
    return f"When to use: {e.when_to_use}\nContent: {e.content}"


class UtilityTester:
    def __init__(
        self, engine: Engine, make_env, rollout_cfg, params, rendering: str, embed, k: int = 4, template=None
    ) -> None:
        self.template = template
        self.engine = engine  # the trained policy's engine, built once by the composition
        self.llm, self.make_env, self.rollout_cfg, self.params = engine.llm, make_env, rollout_cfg, params
        self.rendering, self.embed, self.k = rendering, embed, k

    def test(
        self,
        experiences: Sequence[Experience],
        tasks: dict[str, Task],
        candidates: Sequence[Task],
        vanilla: Sequence[Trajectory],
    ) -> list[tuple[Experience, float, bool]]:
        base: dict[str, list[float]] = {}
        for t in vanilla:
            if not t.flags.experience_guided and not t.flags.failed:
                base.setdefault(t.task_id, []).append(float(t.outcome_reward or 0.0))
        plans: list = []
        jobs: list = []
        for e in experiences:
            src = tasks.get(e.provenance.task_ids[0]) if e.provenance.task_ids else None
            if src is None:
                plans.append((e, []))
                continue
            rel = related_tasks(src, candidates, self.embed, self.k)
            plans.append((e, rel))
            jobs += [
                RolloutJob(
                    task=t,
                    group_id=f"utility-{e.experience_id}",
                    experience=experience_text(e),
                    experience_ids=(e.experience_id,),
                )
                for t in rel
            ]
        trajs = (
            run_rollouts(
                jobs,
                self.make_env,
                self.engine,
                self.rollout_cfg,
                self.params,
                self.rendering,
                show_progress=False,
                template=self.template,
            )
            if jobs
            else []
        )
        out, pos = [], 0
        for e, rel in plans:
            if not rel:
                out.append((e, 0.0, False))
                continue
            rewards = [float(t.outcome_reward or 0.0) for t in trajs[pos : pos + len(rel)]]
            pos += len(rel)
            utility = sum(rewards) / len(rewards)
            known = [sum(base[t.task_id]) / len(base[t.task_id]) for t in rel if t.task_id in base]
            baseline = sum(known) / len(known) if known else 0.0
            out.append((e.model_copy(update={"utility": utility}), utility, utility > baseline))
        return out
