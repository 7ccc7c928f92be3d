"""AgentEvolver's environment-service protocol (upstream ``env_service/interface.md``), answered by our service.

Upstream's client POSTs every request to ``/get_env_profile``, ``/create``, ``/step``, ``/evaluate``, ``/get_info``
or ``/release`` with the body ``{env_type, task_id, instance_id, messages, params}`` and reads ``{success, data}``:

- ``/get_env_profile`` (``params.split``; ours also reads ``params.family``): the split's task ids;
- ``/create`` (``env_type``, ``task_id``): ``{state: [messages], reward, is_terminated, info: {instance_id,
  task_id}}``, the state being the system prompt with the tools, any worked examples, and the first user turn;
- ``/step`` (``messages: {role, content}``): the assistant's text is parsed by our parser (env/action_text.py) and
  stepped; the state is the next user-side message (tool results, or the next turn);
- ``/evaluate``: the score (float); ``/get_info``: the tools and the instance's info; ``/release``: true.

The body of our own protocol never has ``env_type``, so the two are told apart by it on the shared paths. Task
ids from a request are only looked up among the tasks our task sources generate (an unknown id is a 404): an id
from outside never reaches an environment, and BFCL's checker only ever sees ids we made.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolvekit.config import EnvConfig
from evolvekit.env.base import ResetResult, StepResult
from evolvekit.env.prompts import system_prompt
from evolvekit.errors import EnvError
from evolvekit.types import Task

SPLITS = ("train", "dev", "test")


class UpstreamRequest(BaseModel):
    """The one body upstream's client sends to every endpoint."""

    model_config = ConfigDict(extra="forbid")
    env_type: str = "default"
    task_id: str | None = None
    instance_id: str | None = None
    messages: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)


def is_upstream(body: Any) -> bool:
    return isinstance(body, dict) and "env_type" in body


def reply(data: Any) -> dict[str, Any]:
    return {"success": True, "data": data}


def _family_of(task_id: str) -> tuple[str, str] | None:
    """(family, split) of an id our task families generate: ``<family>-<split>-<nnnn>``."""
    m = re.fullmatch(r"([a-z_]+)-(train|dev|test)-\d{4}", task_id)
    return (m.group(1), m.group(2)) if m else None


class TaskIndex:
    """Tasks by id, as our task sources generate them (built on first use per environment and split)."""

    def __init__(self, family_tasks: int = 200) -> None:
        self.family_tasks = family_tasks
        self._by_key: dict[tuple[str, str | None, str], dict[str, Task]] = {}
        self._lock = threading.Lock()

    def split(self, env_type: str, split: str, family: str | None = None) -> dict[str, Task]:
        from evolvekit.env.registry import env_tasks

        key = (env_type, family, split)
        with self._lock:
            if key not in self._by_key:
                cfg = EnvConfig(name=env_type, family=family, family_tasks=self.family_tasks)
                self._by_key[key] = {t.task_id: t for t in env_tasks(cfg, split)}
            return self._by_key[key]

    def find(self, env_type: str, task_id: str, params: dict[str, Any]) -> Task:
        fam = _family_of(task_id)
        if fam is not None and env_type == "bfcl":
            from evolvekit.env.bfcl.families import FAMILIES

            if fam[0] in FAMILIES:
                found = self.split(env_type, fam[1], fam[0]).get(task_id)
                if found is not None:
                    return found
        family = params.get("family") if isinstance(params.get("family"), str) else None
        splits = [params["split"]] if params.get("split") in SPLITS else list(SPLITS)
        for split in splits:
            try:
                tasks = self.split(env_type, split, family)
            except EnvError:
                continue
            if task_id in tasks:
                return tasks[task_id]
        raise LookupError(f"no task '{task_id[:80]}' in environment '{env_type[:40]}'")


def initial_state(reset: ResetResult, rendering: str = "compact") -> list[dict[str, str]]:
    """What an upstream agent starts from: our system prompt with the tools, the worked examples, the request."""

    msgs = [{"role": "system", "content": system_prompt(reset.tools, rendering)}]
    msgs += [{"role": m.role, "content": m.content} for m in reset.examples]
    return msgs + [{"role": "user", "content": reset.observation}]


def step_state(result: StepResult) -> list[dict[str, str]]:
    return [{"role": "user", "content": result.observation}]


def assistant_text(messages: dict[str, Any] | list[dict[str, Any]]) -> str:
    """The assistant's message of a /step body (a message, or a list whose last assistant message counts)."""
    if isinstance(messages, list):
        said = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
        messages = said[-1] if said else {}
    content = messages.get("content", "")
    if not isinstance(content, str):
        raise ValueError("messages.content must be a string")
    return content


def episode(state: list[dict[str, str]], reward: float, done: bool, instance_id: str, task_id: str) -> dict:
    return {
        "state": state,
        "reward": reward,
        "is_terminated": done,
        "info": {"instance_id": instance_id, "task_id": task_id},
    }
