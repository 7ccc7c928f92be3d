"""Replay a task's reference solution through an environment and score it (feasibility / env self-check)."""

from __future__ import annotations

from evolvekit.env.base import Action, Environment, EvalResult
from evolvekit.types import Task, ToolCall


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
