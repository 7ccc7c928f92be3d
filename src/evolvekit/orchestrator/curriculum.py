"""A curriculum hook in the task stage: the task family widens as training success grows (issue: learnable
task families). Families are ordered from narrow to wide (e.g. ``arith`` -> ``arith_wide``); training starts on
the first and moves to the next once the mean train success of the last ``window`` iterations spent on the current
family reaches ``threshold``. It never moves back. The level of every iteration is recomputed from the stored
metrics, so a resumed run draws exactly the tasks it would have drawn.
"""

from __future__ import annotations

import sqlite3
from typing import Sequence

from evolvekit.orchestrator.stages import FixedTaskSupply, IterationContext
from evolvekit.store.sqlite import RunStore
from evolvekit.types import Task, Trajectory


def curriculum_levels(success: Sequence[float], threshold: float, window: int, n_levels: int) -> list[int]:
    """Level used by iterations 0..len(success) (one more than the history): promotion after ``window``
    iterations at a level whose mean success is >= ``threshold``."""
    levels, level, since = [0], 0, []
    for s in success:
        since.append(s)
        if level < n_levels - 1 and len(since) >= window and sum(since[-window:]) / window >= threshold:
            level, since = level + 1, []
        levels.append(level)
    return levels


class CurriculumTaskSupply:
    """(A) with a widening family: one ``FixedTaskSupply`` per family, chosen by the level of the iteration."""

    def __init__(
        self,
        families: Sequence[str],
        tasks_per_family: Sequence[Sequence[Task]],
        per_iteration: int,
        seed: int,
        threshold: float,
        window: int,
    ) -> None:
        self.families = list(families)
        self.supplies = [FixedTaskSupply(t, per_iteration, seed) for t in tasks_per_family]
        self.threshold, self.window = threshold, max(1, window)

    def level(self, ctx: IterationContext) -> int:
        history = []
        if ctx.store is not None:
            metrics = ctx.store.metrics()
            history = [float(metrics[i].get("rollout/success_rate", 0.0)) for i in sorted(metrics) if i < ctx.iteration]
        return curriculum_levels(history, self.threshold, self.window, len(self.supplies))[-1]

    def training_set(self) -> list[Task]:
        return [t for s in self.supplies for t in s.pool]

    def tasks(self, ctx: IterationContext) -> list[Task]:
        return self.supplies[self.level(ctx)].tasks(ctx)

    def observe(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        return {"curriculum/level": float(self.level(ctx))}

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        pass  # the families' tasks are fixed
