"""Request/response bodies of the environment service (shared by server and client)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolvekit.env.base import Action, ResetResult
from evolvekit.types import Task


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateRequest(_Body):
    env: str = "bfcl"
    task: Task | None = None
    sandbox_config: dict[str, Any] | None = None
    backends: list[str] = Field(default_factory=list)


class CreateResponse(_Body):
    instance_id: str
    reset: ResetResult


class StepRequest(_Body):
    instance_id: str
    action: Action


class InstanceRequest(_Body):
    instance_id: str
