"""Request/response bodies of the environment service (shared by server and client)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evolvekit.env.base import Action, ResetResult
from evolvekit.types import Task

# caps one request may state, checked on the decoded JSON before any of it is validated (a 30,000-call step or a
# 2,000-turn task is refused in one length check instead of 30,000 validated models); the environments' own caps are
# lower (BFCL: 32 calls a step, answered with an error observation; 64 turns a task, refused at reset)
MAX_CALLS_PER_REQUEST = 256
MAX_TURNS_PER_REQUEST = 256


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _at_most(data: Any, path: tuple[str, ...], cap: int) -> None:
    """A ValueError naming ``path`` when the list found there in the raw body holds more than ``cap`` items."""
    node = data
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, list) and len(node) > cap:
        raise ValueError(f"{'.'.join(path)}: {len(node)} items, more than the {cap} one request may carry")


class CreateRequest(_Body):
    env: str = "bfcl"
    task: Task | None = None
    sandbox_config: dict[str, Any] | None = None
    backends: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        _at_most(data, ("task", "query"), MAX_TURNS_PER_REQUEST)
        _at_most(data, ("task", "reference_solution"), MAX_TURNS_PER_REQUEST)
        return data


class CreateResponse(_Body):
    instance_id: str
    reset: ResetResult


class StepRequest(_Body):
    instance_id: str
    action: Action

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        _at_most(data, ("action", "tool_calls"), MAX_CALLS_PER_REQUEST)
        return data


class InstanceRequest(_Body):
    instance_id: str
