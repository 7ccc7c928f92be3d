"""Replay a task's reference solution through an environment and score it (feasibility / env self-check), and
``ScoredByReplay``: a plugin's ``evaluate()`` by replaying the reference on a fresh instance."""

from __future__ import annotations

from typing import Any

from evolvekit.env.base import Action, Environment, EvalResult
from evolvekit.types import Task, ToolCall, Trajectory


def replay(env: Environment, task: Task, solution: list[list[ToolCall]] | None = None) -> EvalResult:
    """Execute ``solution`` (default: the task's reference solution) turn by turn, one call per step, then score."""
    calls = solution if solution is not None else (task.reference_solution or [])
    env.reset(task)
    for turn in calls:
        for call in turn:
            env.step(Action(tool_calls=[call]))
        env.step(Action(text="Done."))  # a message without calls ends the turn
    result = env.evaluate()
    env.close()
    return result


class ScoredByReplay:
    """A base class for a plugin environment whose tasks are scored by where the agent left it: ``evaluate()``
    replays the task's reference solution on a fresh instance (``replica()``) and passes the episode when both end
    in the same ``end_state()``. A synthesized task carries only its request and its reference (no metadata), so
    this is how self-questioning's tasks get scored; a person-written task is scored the same way.

    A subclass keeps the task its last ``reset`` got in ``self.task`` and defines ``end_state()`` (what an outcome
    check compares: a value, a dict, the files of a sandbox); ``replica()`` is ``type(self)()`` unless the
    constructor needs arguments. ``reference_state(task)`` may be overridden to read a task's own target instead
    (say, from its metadata)."""

    task: Task | None = None

    def end_state(self) -> Any:
        raise NotImplementedError("a ScoredByReplay environment defines end_state()")

    def replica(self) -> Environment:
        return type(self)()  # type: ignore[return-value]

    def reference_state(self, task: Task) -> Any:
        """The end state the task's reference solution leads to, on a fresh instance."""
        twin = self.replica()
        try:
            twin.reset(task)
            for turn in task.reference_solution or []:
                for call in turn:
                    twin.step(Action(tool_calls=[call]))
            return twin.end_state()  # type: ignore[attr-defined]
        finally:
            twin.close()

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        task = self.task
        if task is None or not task.reference_solution:
            return EvalResult(score=0.0, passed=False, details={"reason": "no task with a reference to compare with"})
        passed = self.end_state() == self.reference_state(task)
        return EvalResult(score=float(passed), passed=passed)
