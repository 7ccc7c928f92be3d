"""The task supply (questioning/supply.py): Eq. 12's p_train per λ, the refusals, the real draw's own seed and
offset, and CoEvolve's hook (signal counts, the regeneration schedule, pending signals, the store's tasks) with
stand-ins for the tracker, regenerator and store."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from conftest import TaskIndexStore

from evolvekit.errors import EvolveKitError
from evolvekit.protocols import IterationContext
from evolvekit.questioning.supply import CoEvolveHook, HybridTaskSupply
from evolvekit.types import Task, TaskSource, Trajectory


def _tasks(prefix, n, source=TaskSource.REAL):
    return [Task(task_id=f"{prefix}{i}", env_name="bfcl", query=f"{prefix} {i}", source=source) for i in range(n)]


SYN, REAL = _tasks("s", 3, TaskSource.SYNTHETIC), _tasks("r", 4)


def _ctx(iteration, store=None):
    return IterationContext(iteration=iteration, seed=0, run_dir=None, store=store)  # type: ignore[arg-type]


def test_p_train_per_lambda_and_the_refusals():
    assert HybridTaskSupply(SYN, REAL, 2, 1.0, 0).training_set() == SYN
    assert HybridTaskSupply(SYN, REAL, 2, 0.0, 0).training_set() == REAL
    assert HybridTaskSupply(SYN, REAL, 2, 0.5, 0).training_set() == SYN + REAL
    with pytest.raises(EvolveKitError, match=r"^λ < 1 needs real training tasks, and there are none$"):
        HybridTaskSupply(SYN, [], 2, 0.5, 0)
    with pytest.raises(EvolveKitError, match=r"^self-questioning produced no synthetic tasks .* may help$"):
        HybridTaskSupply([], REAL, 2, 0.5, 0)
    assert HybridTaskSupply([], REAL, 2, 0.0, 0).tasks(_ctx(0)) != []  # λ = 0 needs no synthetic task


def test_the_real_draw_continues_where_the_last_left_off_with_its_own_seed():
    supply = HybridTaskSupply(SYN, REAL, 2, 0.0, seed=4)
    first = [t.task_id for i in range(2) for t in supply.tasks(_ctx(i))]
    assert sorted(first) == ["r0", "r1", "r2", "r3"]  # one epoch: each real task once
    same = HybridTaskSupply(SYN, REAL, 2, 0.0, seed=4)
    assert [t.task_id for t in same._draw(same.real, 0, 4, 5)] == first  # the real pool's seed is seed + 1
    mixed = HybridTaskSupply(SYN, REAL, 2, 0.5, seed=4)
    real_ids = [t.task_id for i in range(4) for t in mixed.tasks(_ctx(i)) if t.source == TaskSource.REAL]
    assert real_ids == [t.task_id for t in mixed._draw(mixed.real, 0, 4, 5)]  # no real task skipped or repeated
    epochs = [t.task_id for t in supply._draw(supply.real, 0, 8, 4)]
    order = list(range(4))
    random.Random(4 * 100_003 + 1).shuffle(order)
    assert epochs[4:] == [f"r{i}" for i in order]  # the second epoch's order: the seed's own shuffle


@dataclass
class _Signal:
    kind: str


class _Tracker:
    def __init__(self, per_call):
        self.per_call, self.seen = list(per_call), []

    def observe(self, trajectories):
        self.seen.append(list(trajectories))
        return self.per_call.pop(0)


class _Regen:
    def __init__(self):
        self.calls = []

    def regenerate(self, pending, trajectories, tasks):
        self.calls.append((list(pending), dict(trajectories), tasks))
        return _tasks("n", 1, TaskSource.SYNTHETIC)

    def take_traces(self):
        return ["trace"]


def test_the_coevolve_hook_counts_signals_and_regenerates_every_f_iterations_from_what_is_pending():
    tracker = _Tracker([[_Signal("forgetting"), _Signal("rare"), _Signal("rare")], [_Signal("boundary")], []])
    regen, known = _Regen(), []
    hook = CoEvolveHook(tracker, regen, every=2, know=known.append)
    supply = HybridTaskSupply(SYN, REAL, 2, 1.0, 0, coevolve=hook)
    assert known == [REAL + SYN]
    t0, t1 = Trajectory(trajectory_id="a", task_id="s0"), Trajectory(trajectory_id="b", task_id="s1")
    m0 = supply.observe(_ctx(0, TaskIndexStore(SYN[:1])), [t0])
    assert tracker.seen == [[t0]] and regen.calls == []  # iteration 0 of every 2: no regeneration yet
    assert m0 == {
        "coevolve/forgetting": 1.0,
        "coevolve/boundary": 0.0,
        "coevolve/rare": 2.0,
        "coevolve/new_tasks": 0.0,
        "tasks/synthetic_pool": 3.0,
    }
    m1 = supply.observe(_ctx(1, TaskIndexStore(SYN[:1])), [t1])
    (pending, trajs, tasks), = regen.calls  # fmt: skip
    assert [s.kind for s in pending] == ["forgetting", "rare", "rare", "boundary"]  # both iterations' signals
    assert trajs == {"a": t0, "b": t1} and tasks == {"s0": SYN[0]}
    assert m1["coevolve/new_tasks"] == 1.0 and m1["tasks/synthetic_pool"] == 4.0 and m1["coevolve/boundary"] == 1.0
    assert (hook.pending, hook.trajectories, hook.unsaved_traces) == ([], {}, ["trace"])
    supply.observe(_ctx(3, None), [t0])  # nothing pending: no regeneration even on schedule; no store
    assert len(regen.calls) == 1
    never = CoEvolveHook(_Tracker([[_Signal("rare")]]), _Regen(), every=0)
    assert never.observe(_ctx(0), [t0], supply)["coevolve/new_tasks"] == 0.0 and never.regenerator.calls == []


def test_each_pool_is_shuffled_by_its_own_seed_per_epoch_on_a_pool_large_enough_to_tell_seeds_apart():
    syn, real = _tasks("s", 12, TaskSource.SYNTHETIC), _tasks("r", 12)

    def shuffled(pool, seed, epoch):
        order = list(range(len(pool)))
        random.Random(seed * 100_003 + epoch).shuffle(order)
        return [pool[i].task_id for i in order]

    drawn = [t.task_id for t in HybridTaskSupply._draw(syn, 0, 24, 7)]
    assert drawn == shuffled(syn, 7, 0) + shuffled(syn, 7, 1)
    assert shuffled(syn, 7, 0) != shuffled(syn, 8, 0) != shuffled(syn, 7, 1)  # the check can tell them apart
    supply = HybridTaskSupply(syn, real, 12, 0.5, seed=7)
    batch = supply.tasks(_ctx(0))
    assert [t.task_id for t in batch if t.source == TaskSource.SYNTHETIC] == shuffled(syn, 7, 0)[:6]
    assert [t.task_id for t in batch if t.source == TaskSource.REAL] == shuffled(real, 8, 0)[:6]


def test_the_coevolve_hook_regenerates_on_the_last_iteration_of_each_period_and_reads_no_store_when_there_is_none():
    tracker = _Tracker([[_Signal("rare")]] * 6)
    regen = _Regen()
    hook = CoEvolveHook(tracker, regen, every=3)
    supply = HybridTaskSupply(SYN, REAL, 2, 1.0, 0, coevolve=hook)
    fired = [
        supply.observe(_ctx(i), [Trajectory(trajectory_id=f"t{i}", task_id="s0")])["coevolve/new_tasks"]
        for i in range(6)
    ]
    assert fired == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]  # iterations 2 and 5 of every 3
    assert [len(p) for p, _, _ in regen.calls] == [3, 3] and [t for _, _, t in regen.calls] == [{}, {}]


class _RecordingStore:
    def __init__(self):
        self.calls = []

    def put_tasks(self, c, tasks, iteration):
        self.calls.append(("tasks", c, list(tasks), iteration))

    def put_explorations(self, c, traces, iteration):
        self.calls.append(("explorations", c, list(traces), iteration))


def test_commit_stores_the_new_tasks_and_traces_with_the_iteration_then_forgets_them():
    hook = CoEvolveHook(_Tracker([[_Signal("rare")]]), _Regen(), every=1)
    supply = HybridTaskSupply(SYN, REAL, 2, 1.0, 0, coevolve=hook)
    supply.observe(_ctx(4), [Trajectory(trajectory_id="a", task_id="s0")])
    store, conn = _RecordingStore(), object()
    supply.commit(conn, store, 4)  # type: ignore[arg-type]
    new = _tasks("n", 1, TaskSource.SYNTHETIC)
    assert store.calls == [("tasks", conn, new, 4), ("explorations", conn, ["trace"], 4)]
    assert (hook.unsaved, hook.unsaved_traces) == ([], [])
