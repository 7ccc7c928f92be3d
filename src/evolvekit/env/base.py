"""The environment protocol and the typed shapes it exchanges.

An episode: ``reset(task)`` gives the first observation (the first user message) and the visible tools;
``step(action)`` executes the action's tool calls, or — for an action without calls — ends the current user turn
and delivers the next user message; ``evaluate(trajectory)`` scores the episode in [0, 1]; ``close()`` frees it.
``task=None`` resets into *sandbox* mode (no task, free exploration from an initial state).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from evolvekit.types import ChatMessage, StepGrounding, Task, ToolCall, Trajectory

# the observation of an action whose tool call could not be parsed
NO_CALL_ERROR = "Error: could not parse a tool call from your message: {err}"


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolSchema(_Shape):
    """A callable tool: name, description and a JSON-schema-like parameter spec."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


class EntityProfile(_Shape):
    """One entity of an environment profile (AgentEvolver Fig. 4): what it is, its attributes and operations."""

    name: str
    description: str = ""
    attributes: list[str] = Field(default_factory=list)
    operations: list[str] = Field(default_factory=list)


class EnvProfile(_Shape):
    """What an explorer needs to know about an environment before acting (AgentEvolver §3.1)."""

    env_name: str
    name: str
    description: str = ""
    entities: list[EntityProfile] = Field(default_factory=list)


class Action(_Shape):
    """What the agent did in one step: tool calls, and/or a message to the user (which ends the turn)."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parse_error: str | None = None  # set when the model output could not be parsed into calls


class ResetResult(_Shape):
    observation: str
    tools: list[ToolSchema]
    turn_index: int = 0
    num_turns: int = 1
    examples: list[ChatMessage] = Field(default_factory=list)  # worked examples, shown as real chat turns
    system: str | None = None  # the environment's own instructions, shown instead of evolvekit's tool prompt


class CallResult(_Shape):
    name: str
    ok: bool  # executed, and not refused by the backend (a BFCL {"error": ...} result is a refusal)
    output: str
    unknown_tool: bool = False  # the environment offers no tool of that name
    warnings: list[str] = Field(default_factory=list)  # e.g. an argument of the wrong JSON type


def execute_calls(
    calls: Sequence[ToolCall], execute: Callable[[ToolCall], Any], tools: Sequence[ToolSchema] | None = None
) -> tuple[str, list[CallResult]]:
    """A plugin's step made easy: each call run by ``execute(call)`` (its return value, as text, is the call's output;
    an exception is a failed call, its message the output), a call to a tool not in ``tools`` refused as unknown.
    Returns the observation (one output a line) and one ``CallResult`` per call, as ``StepResult`` carries them:
    exploration, curation and step credit read whether each call succeeded from there, never from the text."""
    names = None if tools is None else {t.name for t in tools}
    results: list[CallResult] = []
    for call in calls:
        if names is not None and call.name not in names:
            refused = f"error: no tool {call.name!r}"
            results.append(CallResult(name=call.name, ok=False, output=refused, unknown_tool=True))
            continue
        try:
            out = execute(call)
        except Exception as err:  # the tool refused: a failed call, said to the agent
            results.append(CallResult(name=call.name, ok=False, output=f"error: {err}"))
            continue
        results.append(CallResult(name=call.name, ok=True, output="" if out is None else str(out)))
    return "\n".join(r.output for r in results), results


class StepResult(_Shape):
    observation: str
    reward: float = 0.0
    done: bool = False
    turn_index: int = 0
    new_turn: bool = False  # the observation is the next user message
    tools: list[ToolSchema] | None = None  # set when the visible tool list changed (e.g. miss_func reveals)
    call_results: list[CallResult] = Field(default_factory=list)
    error: str | None = None
    grounding: StepGrounding | None = None  # state facts for grounded step credit, where the env has them


class EvalResult(_Shape):
    score: float
    passed: bool
    details: dict[str, Any] = Field(default_factory=dict)


class EnvInfo(_Shape):
    env_name: str
    instance_id: str = ""
    task_id: str | None = None
    sandbox: bool = False
    turn_index: int = 0
    num_turns: int = 0
    steps: int = 0
    done: bool = False


@runtime_checkable
class Environment(Protocol):
    name: str

    def profile(self) -> list[EnvProfile]: ...

    def reset(self, task: Task | None = None, sandbox_config: dict[str, Any] | None = None) -> ResetResult: ...

    def step(self, action: Action) -> StepResult: ...

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult: ...

    def info(self) -> EnvInfo: ...

    def close(self) -> None: ...


@runtime_checkable
class StateKeyed(Protocol):
    """An environment that can name its backend state (GiGPO's anchor state, ``agent/rollout.py: anchor_key``)."""

    def state_key(self) -> str: ...


@runtime_checkable
class ReferenceDistances(Protocol):
    """An environment whose steps report distances to a task's reference end state (``StepGrounding``; BFCL), and
    which can leave them out for person-written tasks: ``person_reference_distances`` False computes them for
    synthesized tasks only (the composition sets it from ``run.oracle``, once per environment it builds)."""

    person_reference_distances: bool


@runtime_checkable
class SearchesExperience(Protocol):
    """An environment that offers experience search as a tool (EvolveR, ``navigating/tool_env.py``) and reports
    which experiences an episode's searches returned."""

    experience_ids_used: list[str]
