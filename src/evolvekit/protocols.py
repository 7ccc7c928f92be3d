"""The loop's stage protocols and the iteration context: the one module every stage depends on (a leaf).

(A) task supply → (B) rollouts → (C) experience summarisation → (D) sample construction and update
(AgentEvolver §6.1). Self-questioning replaces (A), self-navigating (B)+(C), self-attributing the sample builder of
(D); the master loop (orchestrator/loop.py) only sees these protocols, and the mechanisms implement them without
importing the orchestrator. Every stage returns its metrics as a flat ``dict[str, float]``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

from evolvekit.store.sqlite import RunStore
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

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        """Persist what ``observe`` added (e.g. CoEvolve's new tasks) in the iteration's final transaction; stages
        never write the store themselves."""
        ...


@runtime_checkable
class RolloutStage(Protocol):
    # metrics of the last ``rollout`` call beyond the trajectories themselves (judge cost, retrievals, ...)
    last_metrics: dict[str, float]

    def rollout(self, ctx: IterationContext, tasks: Sequence[Task]) -> list[Trajectory]: ...


@runtime_checkable
class ExperienceStage(Protocol):
    def process(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]: ...

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        """Persist the stage's state in the iteration's final transaction (e.g. the experience pool)."""
        ...


@runtime_checkable
class SampleStage(Protocol):
    def build(
        self, ctx: IterationContext, trajectories: Sequence[Trajectory]
    ) -> tuple[list[TrainingSample], dict[str, float]]: ...


@runtime_checkable
class UpdateStage(Protocol):
    def update(self, ctx: IterationContext, samples: Sequence[TrainingSample]) -> dict[str, float]: ...

    def save(self, path: Path) -> Path: ...
