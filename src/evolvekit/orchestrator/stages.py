"""The baseline stages of the master loop (plain GRPO): fixed real tasks, no experience, the trainer's update.

The protocols and ``IterationContext`` live in ``evolvekit.protocols`` (a leaf every stage depends on); the
baselines that mechanisms extend live beside what they wrap: ``agent.rollout_stage.VanillaRollouts`` (B) and
``train.sample_stage.GRPOSamples`` (D), and ``navigating.stage.NoExperience`` (C). They are re-exported here
for the loop's builder.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Sequence

from evolvekit.agent.rollout_stage import RolloutSettings, VanillaRollouts
from evolvekit.navigating.stage import NoExperience
from evolvekit.protocols import ExperienceStage, IterationContext, RolloutStage, SampleStage, TaskSupply, UpdateStage
from evolvekit.store.sqlite import RunStore
from evolvekit.train.sample_stage import GRPOSamples
from evolvekit.types import Task, TrainingSample, Trajectory

__all__ = [
    "ExperienceStage",
    "FixedTaskSupply",
    "GRPOSamples",
    "IterationContext",
    "NoExperience",
    "RolloutStage",
    "SampleStage",
    "TaskSupply",
    "TrainerUpdate",
    "UpdateStage",
    "RolloutSettings",
    "VanillaRollouts",
]


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

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        pass  # a fixed supply adds nothing


class TrainerUpdate:
    """(D, second half): the GRPO trainer's update, and its checkpoints."""

    def __init__(self, trainer, parallel=None) -> None:
        self.trainer = trainer
        self.parallel = parallel  # train/distributed.py: the other ranks take part in each update

    def update(self, ctx: IterationContext, samples: Sequence[TrainingSample]) -> dict[str, float]:
        if self.parallel is not None:
            self.parallel.broadcast(list(samples))  # the other ranks' serve_updates() receive the batch
        return self.trainer.update(samples).as_metrics()

    def save(self, path: Path) -> Path:
        return self.trainer.save(path)
