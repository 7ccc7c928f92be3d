"""The information boundary: what the training side may read of a task.

A task is either written by a person (``TaskSource.REAL``: a benchmark split, a family's generator, a user's file) or
made by the run (``TaskSource.SYNTHETIC``: synthesized from the run's own exploration, with a reference solution
the run executed itself). The environment's own outcome check may read any task's gold (it is the reward, as in
GRPO). Beyond that reward, nothing on the training side reads a person-written task's reference solution or the
reference end state the environment derives from it: not step credit, experience extraction or validation, cold
start, judges, shaping or curricula. What the run made itself is fair: synthesized tasks' references and the agent's
own trajectories.

Gold is let through only by one explicit switch, ``run.oracle`` (off by default); every output of such a run says
"oracle" (``config show``, the run's summary, the report, evidence tables).

Every training-side consumer asks one ``InformationBoundary`` (built once from the config and handed to it through
its constructor) for its view of a task; the leak test (tests/cpu/test_boundary.py) gives person-written references
sentinel values and checks that none reaches a training prompt, experience, step label, advantage or stored
trajectory unless the switch is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from evolvekit.types import Step, StepGrounding, Task, TaskSource, ToolCall, Trajectory

ORACLE_LABEL = "oracle"


@dataclass(frozen=True)
class InformationBoundary:
    """``oracle``: let person-written gold through to the training side (``run.oracle``)."""

    oracle: bool = False

    def gold_allowed(self, task: Task | None) -> bool:
        """May the training side read this task's reference solution and reference end state?"""
        return task is not None and (self.oracle or task.source == TaskSource.SYNTHETIC)

    def reference(self, task: Task | None) -> list[list[ToolCall]] | None:
        """The task's reference solution where the training side may read it, else None."""
        if task is None or not self.gold_allowed(task):
            return None
        return task.reference_solution

    def references(self, tasks: Sequence[Task]) -> dict[str, list[list[ToolCall]] | None]:
        """Per task id, the reference the training side may read (None where closed or absent)."""
        return {t.task_id: self.reference(t) for t in tasks}

    def task_view(self, task: Task) -> Task:
        """The task as the training side sees it: a person-written task without its reference solution (the rest,
        the request and the initial state the agent is shown, stays)."""
        if self.gold_allowed(task) or task.reference_solution is None:
            return task
        return task.model_copy(update={"reference_solution": None})

    def tasks_view(self, tasks: dict[str, Task]) -> dict[str, Task]:
        return {k: self.task_view(t) for k, t in tasks.items()}

    def steps_view(self, task: Task | None, steps: Sequence[Step]) -> list[Step]:
        """The steps as the training side sees them: for a task whose gold is closed, ``Step.grounding`` keeps only
        whether the state changed (the agent's own observation of its effect); the distances to the reference's end
        state are gold and are dropped."""
        if self.gold_allowed(task):
            return list(steps)
        out: list[Step] = []
        for s in steps:
            g = s.grounding
            if g is None or (g.distance_before is None and g.distance_after is None):
                out.append(s)
            else:
                out.append(s.model_copy(update={"grounding": StepGrounding(state_changed=g.state_changed)}))
        return out

    def trajectories_view(self, tasks: Sequence[Task], trajectories: Sequence[Trajectory]) -> list[Trajectory]:
        """The rollouts as the training side keeps them (the store included): each step seen through ``steps_view``
        of its task (a task not in ``tasks`` counts as person-written)."""
        by_id = {t.task_id: t for t in tasks}
        out = []
        for traj in trajectories:
            task = by_id.get(traj.task_id)
            steps = self.steps_view(task, traj.steps)
            same = all(a is b for a, b in zip(steps, traj.steps))
            out.append(traj if same else traj.model_copy(update={"steps": steps}))
        return out

    @property
    def label(self) -> str:
        """'oracle' for a run that lets gold through, else 'environment-only'."""
        return ORACLE_LABEL if self.oracle else "environment-only"
