"""``env.name: agentevolver``: an environment served by an AgentEvolver environment service (upstream's protocol,
``env_service/interface.md``), e.g. its AppWorld service, or evolvekit's own service (env/service/upstream.py).

    env:
      name: agentevolver
      service_url: http://127.0.0.1:8000
      remote_env_type: appworld          # the env_type the service serves
      remote_params: {}                  # sent with every request (evolvekit's service reads `family`)

Tasks come from ``/get_env_profile`` (ids per split); an episode is one instance (``/create`` ... ``/release``).
The service's initial state is the agent's context: its system message replaces evolvekit's tool prompt, earlier
messages are shown as chat turns, the last user message is the request. Each policy message is sent as the
assistant's text (``/step``); the reply's messages are the observation. The score is ``/evaluate``'s. Any
malformed reply is an ``EnvError`` naming the endpoint.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from evolvekit.bounded_http import bounded_client, bounded_request
from evolvekit.config import EnvConfig
from evolvekit.env.action_text import format_call
from evolvekit.env.base import Action, EnvInfo, EnvProfile, EvalResult, ResetResult, StepResult
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.errors import EnvError
from evolvekit.types import ChatMessage, Task, TaskSource, Trajectory


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str


class _Info(BaseModel):
    model_config = ConfigDict(extra="allow")
    instance_id: str
    task_id: str | None = None


class _Episode(BaseModel):
    """The ``data`` of upstream's /create and /step replies."""

    model_config = ConfigDict(extra="allow")
    state: list[_Message]
    reward: float = 0.0
    is_terminated: bool = False
    info: _Info


class AgentEvolverClient:
    """Upstream's protocol over HTTP: every request carries {env_type, task_id, instance_id, messages, params}."""

    def __init__(self, cfg: EnvConfig, client: httpx.Client | None = None) -> None:
        if not cfg.service_url:
            raise EnvError("env.name agentevolver needs env.service_url (the AgentEvolver environment service)")
        token = os.environ.get(cfg.service_token_env)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.env_type, self.params = cfg.remote_env_type, dict(cfg.remote_params)
        self.http = client or bounded_client(
            base_url=cfg.service_url.rstrip("/"), headers=headers, timeout=cfg.step_timeout_s + 5
        )
        self.deadline_s = cfg.step_timeout_s + 5  # the whole reply, not each read (bounded_http.py)

    def call(self, endpoint: str, **fields: Any) -> Any:
        body: dict[str, Any] = {"env_type": self.env_type, "task_id": None, "instance_id": None, "messages": {}}
        body.update(fields)
        body["params"] = {**self.params, **(fields.get("params") or {})}
        where = f"AgentEvolver service {self.http.base_url}/{endpoint}"
        resp = bounded_request(self.http, "POST", f"/{endpoint}", where, self.deadline_s, json=body)
        if resp.status_code != 200:
            raise EnvError(f"{where} answered {resp.status_code}: {resp.text[:300]}")
        try:
            reply = resp.json()
        except ValueError as err:
            raise EnvError(f"{where} answered a body that is not JSON ({err}): {resp.text[:120]!r}") from None
        if not isinstance(reply, dict) or "data" not in reply:
            raise EnvError(f"{where} answered a malformed reply (no 'data'): {str(reply)[:120]}")
        if reply.get("success") is False:
            raise EnvError(f"{where} reported failure: {str(reply)[:200]}")
        return reply["data"]

    def episode(self, endpoint: str, **fields: Any) -> _Episode:
        data = self.call(endpoint, **fields)
        try:
            return _Episode.model_validate(data)
        except ValidationError as err:
            raise EnvError(
                f"AgentEvolver service /{endpoint} answered a malformed reply: {str(err).splitlines()[0]}"
            ) from None


@register_env("agentevolver", "an AgentEvolver environment service (upstream's protocol; env.service_url)")
class AgentEvolverEnv:
    name = "agentevolver"

    def __init__(self, cfg: EnvConfig, client: httpx.Client | None = None) -> None:
        self.remote = AgentEvolverClient(cfg, client)
        self.instance_id: str | None = None
        self.task_id: str | None = None
        self.steps = 0
        self.done = False

    def profile(self) -> list[EnvProfile]:
        return [EnvProfile(env_name=self.name, name=self.remote.env_type, description="AgentEvolver service")]

    def reset(self, task: Task | None = None, sandbox_config: dict[str, Any] | None = None) -> ResetResult:
        if task is None:
            raise EnvError("an AgentEvolver service episode needs a task (its tasks come from /get_env_profile)")
        self.close()
        ep = self.remote.episode("create", task_id=task.task_id)
        self.instance_id, self.task_id, self.steps, self.done = ep.info.instance_id, task.task_id, 0, False
        msgs = list(ep.state)
        if not msgs or msgs[-1].role != "user":
            raise EnvError("AgentEvolver service /create answered a state that does not end with a user message")
        system = "\n\n".join(m.content for m in msgs if m.role == "system") or None
        examples = [
            ChatMessage(role="user" if m.role == "user" else "assistant", content=m.content)
            for m in msgs[:-1]
            if m.role in ("user", "assistant")
        ]
        return ResetResult(observation=msgs[-1].content, tools=[], examples=examples, system=system)

    def _need(self) -> str:
        if self.instance_id is None:
            raise EnvError("call reset() before using the environment")
        return self.instance_id

    def step(self, action: Action) -> StepResult:

        text = "\n".join([action.text, *(format_call(c) for c in action.tool_calls)]).strip()
        ep = self.remote.episode("step", instance_id=self._need(), messages={"role": "assistant", "content": text})
        self.steps += 1
        self.done = ep.is_terminated
        observation = "\n".join(m.content for m in ep.state)
        return StepResult(observation=observation, reward=ep.reward, done=ep.is_terminated)

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        score = self.remote.call("evaluate", instance_id=self._need())
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise EnvError(f"AgentEvolver service /evaluate answered a score that is not a number: {str(score)[:80]}")
        return EvalResult(score=float(score), passed=float(score) >= 1.0)

    def info(self) -> EnvInfo:
        return EnvInfo(
            env_name=self.name,
            instance_id=self.instance_id or "",
            task_id=self.task_id,
            steps=self.steps,
            done=self.done,
        )

    def close(self) -> None:
        if self.instance_id is not None:
            try:
                self.remote.call("release", instance_id=self.instance_id)
            except EnvError:
                pass  # the service reaps idle instances
            self.instance_id = None


@register_task_source("agentevolver")
def agentevolver_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """The service's task ids of a split. A task's request is only known once an episode starts (/create), so
    ``query`` names the task until then."""
    ids = AgentEvolverClient(cfg).call("get_env_profile", params={"split": split})
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise EnvError("AgentEvolver service /get_env_profile answered something other than a list of task ids")
    return [
        Task(
            task_id=i,
            env_name="agentevolver",
            query=f"task {i} of {cfg.remote_env_type}",
            source=TaskSource.REAL,
            metadata={"remote_env_type": cfg.remote_env_type, "split": split},
        )
        for i in ids
    ]
