"""Groups that teach (issue 96, item 2): what an iteration's groups could teach, and the replacement of groups that
teach nothing before the update.

A GRPO group whose rewards are all equal has all-zero advantages (Eq. 16): it costs a rollout and an update pass
and teaches nothing. DAPO (arXiv 2503.14476, §3.2, dynamic sampling) drops such groups and samples again.
``refill`` replaces each zero-variance group by the group of a spare task of the training set that is informative,
rolling out at most ``budget`` extra groups (``train.refill_groups``; 0 = off, the papers' loop). A spare whose group
is informative too when nothing is left to replace is not kept (the batch keeps its size).

Variance is judged on the outcome before shaping (``Trajectory.unshaped_outcome``: the environment's check, or a
synthesized task's judge mix), as DAPO judges its accuracy reward: a format bonus that varies in a group of
failures does not make it teach the task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from evolvekit.types import Task, Trajectory

# pass-rate bins of the iteration's training tasks: never, (0, .25], (.25, .5], (.5, .75], (.75, 1), always
PASS_BINS = ("0", "0-25", "25-50", "50-75", "75-100", "100")


def groups(trajectories: Sequence[Trajectory]) -> dict[str, list[Trajectory]]:
    """The trajectories by group (``group_id``, else their task), in order."""
    out: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        out.setdefault(t.group_id or t.task_id, []).append(t)
    return out


def informative(group: Sequence[Trajectory]) -> bool:
    """A group whose outcomes (before shaping) are not all equal: the only kind GRPO learns from (Eq. 16)."""
    live = [t.unshaped_outcome for t in group if not t.flags.failed]
    return len(set(live)) > 1


def pass_bin(rate: float) -> str:
    """The pass-rate bin of a task (``PASS_BINS``)."""
    if rate <= 0.0:
        return "0"
    if rate >= 1.0:
        return "100"
    return PASS_BINS[1 + min(3, int(rate * 4 - 1e-9))]


def group_metrics(trajectories: Sequence[Trajectory], success_threshold: float) -> dict[str, float]:
    """What the iteration's groups could teach: distinct tasks, informative and zero-variance groups, and the
    histogram of its training tasks' pass rates (success at ``success_threshold``)."""
    by = groups(trajectories)
    rates = [sum(t.succeeded(success_threshold) for t in g) / len(g) for g in by.values() if g]
    out = {
        "tasks/distinct": float(len({t.task_id for t in trajectories})),
        "groups/informative": float(sum(informative(g) for g in by.values())),
        "groups/zero_variance": float(sum(not informative(g) for g in by.values())),
    }
    for b in PASS_BINS:
        out[f"tasks/pass_rate_hist/{b}"] = float(sum(pass_bin(r) == b for r in rates))
    return out


@dataclass
class Refilled:
    tasks: list[Task]
    trajectories: list[Trajectory]
    zero_variance: int  # groups with zero variance before the refill
    extra_groups: int  # spare groups rolled out
    replaced: int  # zero-variance groups replaced by informative spares


def refill(
    tasks: Sequence[Task],
    trajectories: Sequence[Trajectory],
    spares: Sequence[Task],
    roll: Callable[[list[Task]], list[Trajectory]],
    budget: int,
    seed: int,
) -> Refilled:
    """Replace zero-variance groups by informative groups of ``spares`` (drawn in an order seeded by ``seed``),
    rolling out at most ``budget`` spare groups, as many at a time as groups are left to replace. ``roll`` rolls out
    and scores a list of tasks (one group each). Tasks and trajectories keep their order; a replaced task's place
    goes to its replacement."""
    by = groups(trajectories)
    key = {id(t): (t.group_id or t.task_id) for t in trajectories}
    task_of: dict[str, str] = {}
    for traj in trajectories:
        task_of.setdefault(key[id(traj)], traj.task_id)
    empty = [g for g, members in by.items() if not informative(members)]
    zero = len(empty)
    out_tasks, out_groups = list(tasks), {g: list(members) for g, members in by.items()}
    taken = {t.task_id for t in tasks}
    order = [t for t in spares if t.task_id not in taken]
    random.Random(seed).shuffle(order)
    used = replaced = 0
    while empty and used < budget and order:
        batch = order[: min(len(empty), budget - used)]
        order = order[len(batch) :]
        used += len(batch)
        rolled = roll(batch)
        for spare in batch:
            members = [t for t in rolled if t.task_id == spare.task_id]
            if not empty or not members or not informative(members):
                continue
            gone = empty.pop(0)
            at = next(i for i, t in enumerate(out_tasks) if t.task_id == task_of[gone])
            out_tasks[at] = spare
            del out_groups[gone]
            out_groups[members[0].group_id or members[0].task_id] = members
            replaced += 1
    trajs = [t for members in out_groups.values() for t in members]
    return Refilled(out_tasks, trajs, zero, used, replaced)
