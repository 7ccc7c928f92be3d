"""Rewards for synthetic tasks (AgentEvolver §3.4): the environment's state check, the LLM judge, or a mix.

Wraps the rollout stage: after the rollouts, every trajectory of a synthetic task keeps the environment's check
as ``Trajectory.rewards.state_score`` (BFCL: the official checker against the state and results the reference
solution produces) and gets a judge score (``rewards.judge_score``) when the mode asks for one; the loop's reward
computation (train/rewards.py: shape_rewards) mixes them into ``outcome_reward`` once. Real tasks keep the
environment's reward.
"""

from __future__ import annotations

from typing import Sequence

from evolvekit.protocols import IterationContext, RolloutStage
from evolvekit.questioning.judge import (
    ConstrainedJudge,
    LLMJudge,
    agreement_with_state,
    constant_agreement,
)
from evolvekit.types import Task, TaskSource, Trajectory


class SyntheticRewardRollouts:
    def __init__(self, inner: RolloutStage, mode: str, judge: LLMJudge | ConstrainedJudge | None) -> None:
        """``mode``: ``questioning.reward`` resolved (config.synthetic_reward): state, judge or mix."""
        self.inner, self.mode, self.judge = inner, mode, judge
        self.last_metrics: dict[str, float] = {}

    def rollout(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]:
        trajs = self.inner.rollout(ctx, tasks)
        self.last_metrics = dict(self.inner.last_metrics)
        by_id = {t.task_id: t for t in tasks}
        synthetic = [
            (by_id[t.task_id], t)
            for t in trajs
            if t.task_id in by_id
            and by_id[t.task_id].source == TaskSource.SYNTHETIC
            and not t.flags.failed
            and not (t.evolving is not None and t.evolving.role == "extractor")
        ]  # an extractor's reward is its skill's utility
        judged: list[float | None] = [None] * len(synthetic)
        mode = self.mode
        if synthetic and mode in ("judge", "mix") and self.judge is not None:
            report = self.judge.score(synthetic)
            judged = report.scores
            self.last_metrics.update(
                {
                    "judge/calls": float(report.calls),
                    "judge/fallbacks": float(report.fallbacks),
                    "judge/fallback_rate": report.fallbacks / len(synthetic),
                    "judge/prompt_tokens": float(report.prompt_tokens),
                    "judge/completion_tokens": float(report.completion_tokens),
                }
            )
            states = [t.outcome_reward for _, t in synthetic]
            agree = agreement_with_state(judged, states)
            if agree is not None:  # beside the better constant answer's: the judge's signal is the difference
                self.last_metrics["judge/agreement_with_state"] = agree
                self.last_metrics["judge/constant_agreement"] = constant_agreement(states) or 0.0
        for (_, traj), j in zip(synthetic, judged):  # recorded; train/rewards.py mixes them into the reward, once
            traj.rewards = traj.rewards.model_copy(update={"state_score": traj.outcome_reward, "judge_score": j})
        if synthetic:
            self.last_metrics["rollout/synthetic_state_score"] = sum(
                float(t.rewards.state_score or 0.0) for _, t in synthetic
            ) / len(synthetic)
        return trajs
