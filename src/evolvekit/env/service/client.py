"""A client that implements the environment protocol over the service's HTTP API."""

from __future__ import annotations

import os
from typing import Any

import httpx
from pydantic import ValidationError

from evolvekit.bounded_http import Reply, bounded_client, bounded_request
from evolvekit.config import EnvConfig
from evolvekit.env.base import Action, EnvInfo, EnvProfile, EvalResult, ResetResult, StepResult
from evolvekit.env.service.schemas import CreateRequest, CreateResponse
from evolvekit.errors import EnvError
from evolvekit.types import Task, Trajectory


class RemoteEnv:
    """Looks exactly like a local environment; every episode is one server-side instance."""

    def __init__(
        self,
        base_url: str,
        env: str = "bfcl",
        token: str | None = None,
        backends: list[str] | None = None,
        timeout_s: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.name = env
        self.backends = list(backends or [])
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = client or bounded_client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.deadline_s = timeout_s  # the whole reply, not each read (bounded_http.py)
        self.instance_id: str | None = None

    @classmethod
    def from_config(cls, cfg: EnvConfig) -> "RemoteEnv":
        return cls(
            cfg.service_url or "",
            env=cfg.name,
            token=os.environ.get(cfg.service_token_env),
            backends=cfg.backends,
            timeout_s=cfg.step_timeout_s + 5,
        )

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        where = f"environment service {self.client.base_url}{path}"
        resp = bounded_request(self.client, "POST", path, where, self.deadline_s, json=body)
        if resp.status_code != 200:
            raise EnvError(f"environment service {path} answered {resp.status_code}: {_detail(resp)}")
        try:
            return resp.json()
        except ValueError as err:
            raise EnvError(
                f"environment service {path} answered 200 with a body that is not JSON ({err}): {resp.text[:120]!r}"
            ) from None

    def _model(self, shape, path: str, body: dict[str, Any]):
        try:
            return shape.model_validate(self._post(path, body))
        except ValidationError as err:
            raise EnvError(
                f"environment service {path} answered a malformed reply: {str(err).splitlines()[0]}"
            ) from None

    def profile(self) -> list[EnvProfile]:
        where = f"environment service {self.client.base_url}/profile"
        resp = bounded_request(self.client, "GET", "/profile", where, self.deadline_s, params={"env": self.name})
        if resp.status_code != 200:
            raise EnvError(f"environment service /profile answered {resp.status_code}: {_detail(resp)}")
        try:
            body = resp.json()
            if not isinstance(body, list):
                raise ValueError("not a list of profiles")
            return [EnvProfile.model_validate(p) for p in body]
        except (ValueError, ValidationError) as err:
            raise EnvError(
                f"environment service /profile answered a malformed reply: {str(err).splitlines()[0]}"
            ) from None

    def reset(self, task: Task | None = None, sandbox_config: dict[str, Any] | None = None) -> ResetResult:
        self.close()
        req = CreateRequest(env=self.name, task=task, sandbox_config=sandbox_config, backends=self.backends)
        out = self._model(CreateResponse, "/create", req.model_dump(mode="json"))
        self.instance_id = out.instance_id
        return out.reset

    def _need(self) -> str:
        if self.instance_id is None:
            raise EnvError("call reset() before using the environment")
        return self.instance_id

    def step(self, action: Action) -> StepResult:
        return self._model(StepResult, "/step", {"instance_id": self._need(), "action": action.model_dump(mode="json")})

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        return self._model(EvalResult, "/evaluate", {"instance_id": self._need()})

    def info(self) -> EnvInfo:
        return self._model(EnvInfo, "/info", {"instance_id": self._need()})

    def close(self) -> None:
        if self.instance_id is not None:
            try:  # under the same deadline as every request: a trickling server cannot hang a close
                where = f"environment service {self.client.base_url}/release"
                body = {"instance_id": self.instance_id}
                bounded_request(self.client, "POST", "/release", where, self.deadline_s, json=body)
            except (httpx.HTTPError, EnvError):
                pass  # the server reaps idle instances anyway
            self.instance_id = None


def _detail(resp: Reply) -> str:
    """The ``detail`` of an error reply, or the start of its text when it is not JSON (a proxy's 502 page, a 500)."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200] or "(empty body)"
    return str(body.get("detail") if isinstance(body, dict) else body)[:500]
