"""An OpenEnv environment server as an environment (``env.name: openenv``; the ``openenv`` extra).

OpenEnv (meta-pytorch/OpenEnv, ``openenv-core``) serves a Gym-like environment over HTTP and a WebSocket session
at ``/ws``: the client sends ``{"type": "reset", "data": {seed, ...}}``, ``{"type": "step", "data": <action>}``,
``{"type": "state"}`` and ``{"type": "close"}``; the server answers ``{"type": "observation", "data":
{observation, reward, done}}``, ``{"type": "state", "data": {...}}`` or ``{"type": "error", "data": {message,
code}}``. Each session has its own environment instance, so every episode here opens its own session.

How it maps onto evolvekit's protocol:

- The agent gets one tool, ``env.openenv.tool`` (``step``), whose parameters are the action's JSON schema from the
  server's ``GET /schema``; each call is one OpenEnv step. A message without calls ends the episode.
- Observations are shown as JSON without ``done``, ``reward`` and ``env.openenv.hidden_fields``; a step the server
  refuses (an invalid action) is an error observation, and the episode goes on.
- Tasks are reset seeds: the train split uses seeds ``0..episodes-1``, the test split starts at
  ``env.openenv.test_seed_offset``; a task's request is ``env.openenv.instructions`` and the observation that
  seed's reset returns. Task ids are made here from the split and the seed, never taken from the server.
- The score is the episode's return (sum of rewards) over ``env.openenv.success_return``, clipped to [0, 1]; the
  episode passes when the return reaches it. A synthesized task (no seed) is scored the same way, by the
  environment's own reward, so with self-questioning ``questioning.reward`` should include the judge.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from evolvekit.bounded_http import MAX_REPLY_DEPTH
from evolvekit.config import EnvConfig, OpenEnvConfig, OpenEnvExample
from evolvekit.env.base import (
    NO_CALL_ERROR,
    Action,
    CallResult,
    EntityProfile,
    EnvInfo,
    EnvProfile,
    EvalResult,
    ResetResult,
    StepResult,
    ToolSchema,
)
from evolvekit.env.cancel import checkpoint
from evolvekit.env.examples import Played, played_examples
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.errors import EnvError
from evolvekit.safejson import bracket_depth
from evolvekit.types import ChatMessage, Task, ToolCall, Trajectory, new_id

log = logging.getLogger(__name__)

STATE_IGNORED = ("episode_id", "step_count")  # per-session bookkeeping, not the environment's state


def openenv_available() -> str | None:
    """None when the WebSocket client is installed, else how to install it."""
    try:
        import websockets.sync.client  # noqa: F401
    except ImportError:
        return "the 'openenv' extra is not installed (pip install -c constraints.txt 'evolvekit[openenv]')"
    return None


def base_urls(url: str) -> tuple[str, str]:
    """The server's HTTP base and its WebSocket session URL, from either form of ``env.openenv.url``."""
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise EnvError(f"env.openenv.url: '{url}' is not an http(s):// or ws(s):// URL")
    secure = parts.scheme in ("https", "wss")
    http = urlunsplit(("https" if secure else "http", parts.netloc, parts.path, "", ""))
    ws = urlunsplit(("wss" if secure else "ws", parts.netloc, parts.path + "/ws", "", ""))
    return http, ws


def observation_text(observation: Any, hidden: list[str]) -> str:
    """An OpenEnv observation as the agent sees it: its fields as JSON, without the hidden ones."""
    if not isinstance(observation, dict):
        return json.dumps(observation)
    shown = {k: v for k, v in observation.items() if k not in hidden}
    return json.dumps(shown, ensure_ascii=False, sort_keys=True)


class OpenEnvSession:
    """One WebSocket session (one environment instance on the server)."""

    def __init__(self, ws_url: str, timeout_s: float) -> None:
        from websockets.sync.client import connect

        self.timeout_s = timeout_s
        try:
            self.ws = connect(ws_url, open_timeout=timeout_s, close_timeout=2, max_size=2**24)
        except (OSError, TimeoutError) as err:
            raise EnvError(f"env.openenv.url: cannot open an OpenEnv session at {ws_url}: {err}") from None
        except Exception as err:  # websockets' handshake errors (an HTTP server that is not OpenEnv)
            raise EnvError(f"env.openenv.url: {ws_url} refused the WebSocket session: {err}") from None

    def request(self, kind: str, data: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Send one message; the reply's type and data. A malformed reply is an EnvError naming the message."""
        message: dict[str, Any] = {"type": kind}
        if data is not None:
            message["data"] = data
        try:
            self._drain()  # a reply belongs to its request: what the server sent unasked before it is dropped
            self.ws.send(json.dumps(message))
            raw = self.ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            raise EnvError(f"OpenEnv {kind}: no reply within {self.timeout_s:g}s (env.step_timeout_s)") from None
        except Exception as err:
            raise EnvError(f"OpenEnv {kind}: the session failed: {err}") from None
        if bracket_depth(raw if isinstance(raw, str) else raw.decode("utf-8", "replace")) > MAX_REPLY_DEPTH:
            raise EnvError(f"OpenEnv {kind}: the reply nests deeper than {MAX_REPLY_DEPTH} levels")
        try:
            reply = json.loads(raw)
        except (TypeError, ValueError, RecursionError):
            raise EnvError(f"OpenEnv {kind}: the reply is not JSON: {str(raw)[:120]!r}") from None
        if (
            not isinstance(reply, dict)
            or not isinstance(reply.get("type"), str)
            or not isinstance(reply.get("data"), dict)
        ):
            raise EnvError(f"OpenEnv {kind}: the reply is not {{type, data}}: {str(raw)[:120]!r}")
        return reply["type"], reply["data"]

    def _drain(self, most: int = 1000) -> None:
        """Drop the messages waiting unread (a server that sent more than one reply), at most ``most``; said once."""
        dropped = 0
        while dropped < most:
            try:
                self.ws.recv(timeout=0)
            except TimeoutError:
                break
            dropped += 1
        if dropped:
            log.warning("OpenEnv: %d message(s) the server sent unasked were dropped before the next request", dropped)

    def close(self) -> None:
        """Ask the server to end the session and let it close the connection (it frees the instance then)."""
        try:
            self.ws.send(json.dumps({"type": "close"}))
            self.ws.recv(timeout=2)  # returns or raises once the server has closed the connection
        except Exception:  # closed, gone or slow: the socket is closed below either way
            pass
        try:
            self.ws.close()
        except Exception:
            pass


def parse_observation(kind: str, reply_type: str, data: dict[str, Any]) -> tuple[Any, float, bool]:
    """``(observation, reward, done)`` of an observation reply."""
    if reply_type != "observation" or "observation" not in data:
        raise EnvError(f"OpenEnv {kind}: expected an observation reply, got type '{reply_type}'")
    reward, done = data.get("reward"), data.get("done", False)
    if reward is not None and (isinstance(reward, str) or not isinstance(reward, (int, float))):
        raise EnvError(f"OpenEnv {kind}: reward is not a number: {reward!r}")
    if not isinstance(done, bool):
        raise EnvError(f"OpenEnv {kind}: done is not a boolean: {done!r}")
    return data["observation"], float(reward or 0.0), done


def error_text(data: dict[str, Any]) -> str:
    code = f" ({data['code']})" if isinstance(data.get("code"), str) else ""
    return f"Error: {str(data.get('message', 'the server refused the action'))[:500]}{code}"


class OpenEnvEnv:
    """One OpenEnv session per episode."""

    name = "openenv"

    def __init__(self, cfg: EnvConfig) -> None:
        missing = openenv_available()
        if missing:
            raise EnvError(missing)
        if not cfg.openenv.url:
            raise EnvError("env.openenv.url: env.name openenv needs the server's URL (e.g. http://127.0.0.1:8000)")
        self.cfg, self.o = cfg, cfg.openenv
        self.http_url, self.ws_url = base_urls(cfg.openenv.url)
        self.session: OpenEnvSession | None = None
        self.task: Task | None = None
        self.instance_id = new_id("openenv")
        self._tool: ToolSchema | None = None
        self.steps, self.done, self.free, self.ret = 0, False, False, 0.0

    # --- what the server offers ------------------------------------------------------------------------------------
    def _get(self, path: str) -> dict[str, Any]:
        from evolvekit.bounded_http import bounded_request

        t = self.cfg.step_timeout_s
        reply = bounded_request(None, "GET", self.http_url + path, f"OpenEnv GET {path}", t, timeout=t)
        if reply.status_code != 200:
            raise EnvError(f"OpenEnv GET {path}: answered {reply.status_code}: {reply.text[:200]}")
        try:
            data = reply.json()
        except ValueError as err:
            raise EnvError(f"OpenEnv GET {path}: {err}") from None
        if not isinstance(data, dict):
            raise EnvError(f"OpenEnv GET {path}: the reply is not a JSON object")
        return data

    def tool(self) -> ToolSchema:
        """The agent's one tool: the server's action schema (``GET /schema``) without its ``metadata`` field."""
        if self._tool is None:
            action = self._get("/schema").get("action")
            if not isinstance(action, dict):
                raise EnvError("OpenEnv GET /schema: no action schema")
            raw_props, raw_required = action.get("properties") or {}, action.get("required") or []
            if not isinstance(raw_props, dict) or not isinstance(raw_required, list):
                raise EnvError("OpenEnv GET /schema: action.properties must be an object and action.required a list")
            props = {k: v for k, v in raw_props.items() if k != "metadata"}
            required = [r for r in raw_required if isinstance(r, str) and r in props]
            about = self._get("/metadata")
            self._tool = ToolSchema(
                name=self.o.tool,
                description=f"take one action in {about.get('name') or 'the environment'}: "
                f"{str(about.get('description') or '')[:300]}".rstrip(": "),
                parameters={"type": "object", "properties": props, "required": required},
            )
        return self._tool

    def profile(self) -> list[EnvProfile]:
        about = self._get("/metadata")
        tool = self.tool()
        return [
            EnvProfile(
                env_name=self.name,
                name=str(about.get("name") or "OpenEnv environment"),
                description=str(about.get("description") or ""),
                entities=[
                    EntityProfile(
                        name="action",
                        description=tool.description,
                        attributes=sorted(tool.parameters["properties"]),
                        operations=[tool.name],
                    )
                ],
            )
        ]

    # --- the environment protocol ----------------------------------------------------------------------------------
    def reset(self, task: Task | None = None, sandbox_config: dict[str, Any] | None = None) -> ResetResult:
        self.close()
        tool = self.tool()
        params = dict(self.o.reset_params)
        seed = task.metadata.get("seed") if task is not None else None
        if seed is not None:
            params["seed"] = seed
        self.session = OpenEnvSession(self.ws_url, self.cfg.step_timeout_s)
        kind, data = self.session.request("reset", params)
        if kind == "error":
            self.close()
            raise EnvError(f"OpenEnv reset: {error_text(data)}")
        observation, _, _ = parse_observation("reset", kind, data)
        self.task, self.free = task, task is None
        self.steps, self.done, self.ret = 0, False, 0.0
        shown = observation_text(observation, self.o.hidden_fields)
        if task is not None and seed is None:  # a synthesized task: its request, then what the environment shows
            first = f"{task.turns[0]}\n\n{shown}"
        else:
            first = f"{self.o.instructions}\n\n{shown}".strip()
        return ResetResult(observation=first, tools=[tool], examples=worked_examples(self.cfg))

    def step(self, action: Action) -> StepResult:
        if self.session is None:
            raise EnvError("step() before reset()")
        if self.done:
            return StepResult(observation="Error: the episode is over.", done=True, error="episode_done")
        self.steps += 1
        if action.parse_error is not None and not action.tool_calls:
            return StepResult(observation=NO_CALL_ERROR.format(err=action.parse_error), error="parse_error")
        if not action.tool_calls:
            self.done = True
            return StepResult(observation="", done=True)
        results: list[CallResult] = []
        reward = 0.0
        for call in action.tool_calls:
            checkpoint()  # between calls: a step past its request's deadline stops here (env/cancel.py)
            result, r = self._execute(call)
            results.append(result)
            reward += r
            if self.done:
                break
        obs = "\n".join(f"[{r.name}] {r.output}" for r in results)
        return StepResult(observation=obs, reward=reward, done=self.done, call_results=results)

    def _execute(self, call: ToolCall) -> tuple[CallResult, float]:
        assert self.session is not None
        if call.name != self.o.tool:
            out = f"Error: unknown tool '{call.name}'. Available tools: {self.o.tool}"
            return CallResult(name=call.name, ok=False, unknown_tool=True, output=out), 0.0
        kind, data = self.session.request("step", dict(call.arguments))
        if kind == "error":
            return CallResult(name=call.name, ok=False, output=error_text(data)), 0.0
        observation, reward, done = parse_observation("step", kind, data)
        self.ret += reward
        self.done = done
        return CallResult(name=call.name, ok=True, output=observation_text(observation, self.o.hidden_fields)), reward

    def state(self) -> dict[str, Any]:
        """The server's state of this session (``{"type": "state"}``)."""
        if self.session is None:
            raise EnvError("state() before reset()")
        kind, data = self.session.request("state")
        if kind != "state":
            raise EnvError(f"OpenEnv state: expected a state reply, got type '{kind}'")
        return data

    def state_key(self) -> str:
        """GiGPO's anchor state: the server's state without its per-session bookkeeping."""
        state = {k: v for k, v in self.state().items() if k not in STATE_IGNORED}
        return hashlib.sha1(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        if self.task is None or self.session is None:
            raise EnvError("evaluate() needs an episode started with a task (sandbox episodes have no score)")
        score = min(1.0, max(0.0, self.ret / self.o.success_return))
        passed = self.ret >= self.o.success_return
        return EvalResult(score=score, passed=passed, details={"return": self.ret, "done": self.done})

    def info(self) -> EnvInfo:
        return EnvInfo(
            env_name=self.name,
            instance_id=self.instance_id,
            task_id=self.task.task_id if self.task else None,
            sandbox=self.free,
            num_turns=1,
            steps=self.steps,
            done=self.done,
        )

    def close(self) -> None:
        """End the session (safe to call twice); the server frees its environment instance."""
        session, self.session = self.session, None
        if session is not None:
            session.close()


def worked_examples(cfg: EnvConfig) -> list[ChatMessage]:
    """``env.openenv.examples`` as chat turns with the server's real observations, each played on a fresh session,
    once per configuration. An action the server refuses, or an episode that does not pass, is a config error."""
    plain = cfg.model_copy(update={"openenv": cfg.openenv.model_copy(update={"examples": []})})

    def play(i: int, example: OpenEnvExample) -> Played:
        env = OpenEnvEnv(plain)
        try:
            task = Task(task_id=f"openenv-example-{i}", env_name="openenv", query="-", metadata={"seed": example.seed})
            request = env.reset(task).observation
            steps = []
            for arguments in example.actions:
                call = ToolCall(name=cfg.openenv.tool, arguments=dict(arguments))
                result, _ = env._execute(call)
                if not result.ok:
                    raise EnvError(f"env.openenv.examples[{i}]: the server refused {arguments}: {result.output}")
                steps.append((call, result.output))
            if not env.evaluate().passed:
                raise EnvError(f"env.openenv.examples[{i}]: the episode does not reach env.openenv.success_return")
        finally:
            env.close()
        return request, steps, example.final

    return played_examples(cfg.openenv, cfg.openenv.examples, play)


@register_env("openenv", "an OpenEnv environment server (env.openenv.url; extra 'openenv'), one session per episode")
def _make(cfg: EnvConfig) -> OpenEnvEnv:
    return OpenEnvEnv(cfg)


@register_task_source("openenv", available=lambda cfg: bool(cfg.openenv.url))
def openenv_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """One task per reset seed: train seeds from 0, test (and dev) seeds from ``env.openenv.test_seed_offset``."""
    o: OpenEnvConfig = cfg.openenv
    if split not in ("train", "dev", "test"):
        raise EnvError(f"env.name openenv has splits train, dev and test, not '{split}'")
    start = {"train": 0, "dev": o.test_seed_offset // 2, "test": o.test_seed_offset}[split]
    count = min(o.episodes, cfg.family_tasks)
    env = OpenEnvEnv(cfg)
    tasks = []
    try:
        for seed in range(start, start + count):
            first = env.reset(Task(task_id="probe", env_name="openenv", query="-", metadata={"seed": seed}))
            tasks.append(
                Task(
                    task_id=f"openenv-{split}-{seed}",
                    env_name="openenv",
                    query=first.observation,
                    metadata={"seed": seed},
                )
            )
    finally:
        env.close()
    return tasks
