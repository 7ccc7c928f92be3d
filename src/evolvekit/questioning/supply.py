"""Stage A with self-questioning: synthetic tasks, mixed with real ones by λ (AgentEvolver Eq. 12)."""

from __future__ import annotations

import math
import random
import sqlite3
from typing import Callable, Sequence

from evolvekit.errors import EvolveKitError
from evolvekit.protocols import IterationContext
from evolvekit.store.sqlite import RunStore
from evolvekit.types import Task, TaskSource, Trajectory


def synthetic_so_far(batch: int, lam: float, iterations: int) -> int:
    """Eq. 12 over a run: of the first ``iterations`` batches of B tasks, round(λ·B·iterations) are proxy (synthetic)
    tasks, halves rounded up."""
    return math.floor(lam * batch * iterations + 0.5 + 1e-9)


def hybrid_counts(batch: int, lam: float, iteration: int = 0) -> tuple[int, int]:
    """Eq. 12: of iteration ``iteration``'s batch of B tasks, how many are proxy (synthetic) tasks and how many real.

    λ is realized over the run, not rounded the same way in every batch: with B = 3 and λ = 0.5 the batches hold
    2, 1, 2, 1 synthetic tasks (6 of 12 over four iterations), where rounding λ·B = 1.5 in every batch would give
    2 of 3 each time, an effective λ of 2/3."""
    n_syn = synthetic_so_far(batch, lam, iteration + 1) - synthetic_so_far(batch, lam, iteration)
    return n_syn, batch - n_syn


class HybridTaskSupply:
    """Draws ``per_iteration`` tasks per iteration: λ synthetic, 1 − λ real, each pool reshuffled per epoch.

    ``synthetic`` None: the tasks come from the loop's synthesis stage (``receive``) before the first draw."""

    def __init__(
        self,
        synthetic: Sequence[Task] | None,
        real: Sequence[Task],
        per_iteration: int,
        lam: float,
        seed: int,
        coevolve: CoEvolveHook | None = None,
    ) -> None:
        self.synthetic: list[Task] = []
        self.real = list(real)
        self.per_iteration, self.lam, self.seed = per_iteration, lam, seed
        self.coevolve = coevolve  # CoEvolve: adds signal-guided tasks during training
        if synthetic is not None:
            self.receive(synthetic)
        if lam < 1 and not self.real:
            raise EvolveKitError("λ < 1 needs real training tasks, and there are none")

    def receive(self, synthetic: Sequence[Task]) -> None:
        """The synthesized tasks (self-questioning's, from the loop's synthesis stage); CoEvolve's regeneration
        dedups against them and the real ones."""
        self.synthetic = list(synthetic)
        if self.lam > 0 and not self.synthetic:
            raise EvolveKitError(
                "self-questioning produced no synthetic tasks (see the synthesis funnel in the log); "
                "a stronger explorer/synthesizer role or more exploration rounds may help"
            )
        if self.coevolve is not None:
            self.coevolve.know(self.real + self.synthetic)

    @staticmethod
    def _draw(pool: list[Task], start: int, count: int, seed: int) -> list[Task]:
        out = []
        for k in range(start, start + count):
            epoch, pos = divmod(k, len(pool))
            order = list(range(len(pool)))
            random.Random(seed * 100_003 + epoch).shuffle(order)
            out.append(pool[order[pos]])
        return out

    def training_set(self) -> list[Task]:
        """p_train of Eq. 12: the synthetic tasks, and the real ones unless λ = 1 (the paper's default)."""
        return (self.synthetic if self.lam > 0 else []) + (self.real if self.lam < 1 else [])

    def tasks(self, ctx: IterationContext) -> list[Task]:
        n_syn, n_real = hybrid_counts(self.per_iteration, self.lam, ctx.iteration)
        syn_before = synthetic_so_far(self.per_iteration, self.lam, ctx.iteration)
        out = self._draw(self.synthetic, syn_before, n_syn, self.seed) if n_syn else []
        if n_real:
            out += self._draw(self.real, ctx.iteration * self.per_iteration - syn_before, n_real, self.seed + 1)
        return out

    def observe(self, ctx: IterationContext, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        metrics = {}
        if self.coevolve is not None:
            metrics.update(self.coevolve.observe(ctx, trajectories, self))
        metrics["tasks/synthetic_pool"] = float(len(self.synthetic))
        return metrics

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        """What observing added (CoEvolve's new tasks), in the iteration's final transaction."""
        if self.coevolve is not None:
            self.coevolve.commit(c, store, iteration)


def hybrid_advantage_scale(decay: float):
    """The sample builder's advantage scale under hybrid training (λ < 1): proxy (synthetic) tasks' trajectories
    are down-weighted by ``decay`` (§7.1.3), looked up among the run's stored tasks each iteration."""

    def per_iteration(ctx: IterationContext):
        return synthetic_advantage_scale(ctx.store.task_index(), decay)

    return per_iteration


def synthetic_advantage_scale(tasks_by_id: dict[str, Task], decay: float):
    """§7.1.3: in hybrid training, advantages of proxy-task trajectories are multiplied by ``decay`` (0.5)."""

    def scale(traj: Trajectory) -> float:
        task = tasks_by_id.get(traj.task_id)
        return decay if task is not None and task.source == TaskSource.SYNTHETIC else 1.0

    return scale


class CoEvolveHook:
    """Tracks CoEvolve signals on every iteration's trajectories; every F iterations turns them into new tasks
    (stored with their signal provenance) that join the synthetic pool."""

    def __init__(self, tracker, regenerator, every: int, know: Callable[[Sequence[Task]], None] | None = None) -> None:
        self.tracker, self.regenerator, self.every = tracker, regenerator, every
        # the tasks regeneration must not copy (its dedup's seed): given once the synthesized tasks exist
        self.know: Callable[[Sequence[Task]], None] = know if know is not None else (lambda tasks: None)
        self.pending: list = []
        self.trajectories: dict[str, Trajectory] = {}
        self.unsaved: list[Task] = []  # new tasks and their traces, for the iteration's commit
        self.unsaved_traces: list = []

    def observe(
        self, ctx: IterationContext, trajectories: Sequence[Trajectory], supply: HybridTaskSupply
    ) -> dict[str, float]:
        signals = self.tracker.observe(trajectories)
        self.pending += signals
        self.trajectories.update({t.trajectory_id: t for t in trajectories})
        metrics = {
            f"coevolve/{k}": float(sum(s.kind == k for s in signals)) for k in ("forgetting", "boundary", "rare")
        }
        new: list[Task] = []
        if self.every and (ctx.iteration + 1) % self.every == 0 and self.pending:
            tasks = ctx.store.task_index() if ctx.store is not None else {}
            new = self.regenerator.regenerate(self.pending, self.trajectories, tasks)
            self.unsaved += new
            self.unsaved_traces += self.regenerator.take_traces()
            supply.synthetic += new
            self.pending, self.trajectories = [], {}
        metrics["coevolve/new_tasks"] = float(len(new))
        return metrics

    def commit(self, c: sqlite3.Connection, store: RunStore, iteration: int) -> None:
        """The new tasks (with their signal provenance) and their exploration traces, in the iteration's final
        transaction: the loop commits them with the iteration, and a run killed before that regenerates them."""
        store.put_tasks(c, self.unsaved, iteration)
        store.put_explorations(c, self.unsaved_traces, iteration)
        self.unsaved, self.unsaved_traces = [], []
