"""FastAPI server exposing /create, /step, /evaluate, /info, /profile, /release and /healthz, and upstream
AgentEvolver's protocol on /get_env_profile, /create, /step, /evaluate, /get_info and /release
(env/service/upstream.py: a body with ``env_type`` is upstream's).

Binds 127.0.0.1 by default. With a token configured, every request but /healthz needs
``Authorization: Bearer <token>`` (401 otherwise). Bodies over ``max_body_bytes`` (/create) or
``max_call_body_bytes`` (every other route) get 413, however they are sent (``Content-Length`` or chunked: the body
is counted as it arrives); bodies nested deeper than ``max_body_depth``, stating more calls or turns than the
request caps (env/service/schemas.py), or failing schema validation get 422 naming the field. Bodies are decoded
and validated in at most ``decode_workers`` worker threads, never on the event loop. Each step runs under a timeout
(504 when exceeded; the instance is then marked broken and must be released), and so does each create; the work
itself stops at its next cancellation checkpoint (env/cancel.py). Instances idle for longer than ``idle_ttl_s`` are
reaped; at most ``max_instances`` exist at once (503 beyond, checked and reserved atomically). The security model is
in docs/environments.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from evolvekit.config import EnvConfig
from evolvekit.env import cancel
from evolvekit.env.action_text import parse_action
from evolvekit.env.base import EnvInfo, Environment, EnvProfile, EvalResult, StepResult
from evolvekit.env.registry import make_env
from evolvekit.env.service import upstream
from evolvekit.env.service.schemas import CreateRequest, CreateResponse, InstanceRequest, StepRequest
from evolvekit.errors import EvolveKitError
from evolvekit.safejson import json_depth_path, surely_shallow

log = logging.getLogger(__name__)


@dataclass
class _Instance:
    env: Environment
    task_id: str = ""
    env_name: str = ""
    tools: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    broken: str | None = None


@dataclass
class ServiceSettings:
    token: str | None = None
    step_timeout_s: float = 10.0  # each step, evaluate and info call; its work is cancelled past it (env/cancel.py)
    create_timeout_s: float = 60.0  # building an environment (a JVM, a server process) and resetting it
    idle_ttl_s: float = 600.0
    reap_interval_s: float = 30.0
    max_body_bytes: int = 2_000_000  # /create, whose task may carry a large initial state
    # every other route's body (a step: at most 256 calls, model text under the parser's 200,000 characters): its JSON
    # is decoded in C holding the GIL, ~30 ms for 1.4 MB, which /healthz would wait out
    max_call_body_bytes: int = 524_288
    max_body_depth: int = 32
    # request bodies decoded and validated at once, each in a worker thread: CPU work under the GIL, so more threads
    # only make the event loop (and /healthz) wait longer for the GIL; the rest queue, costing nothing meanwhile
    decode_workers: int = 2
    max_instances: int = 1024
    default_env: str = "bfcl"
    # the Host header names one of these (a port after it is ignored): a web page that rebinds its own name to
    # 127.0.0.1 still sends its name, and is refused (DNS rebinding); `env serve --host` adds the bind address
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
    # the environments this service creates; None = every registered one (in-process use). `env serve` passes the
    # ones named on its command line, so a client cannot start a simulator the operator did not offer
    envs: tuple[str, ...] | None = None
    # instance caps of heavy environments (each instance a JVM or a server process), inside max_instances
    heavy_limits: dict[str, int] = field(default_factory=lambda: {"scienceworld": 4, "mcp": 16, "openenv": 16})
    # and their start rate: new instances per rolling minute (a JVM takes 5-6 s of CPU to start); past it, 429
    heavy_starts_per_minute: dict[str, int] = field(
        default_factory=lambda: {"scienceworld": 6, "mcp": 60, "openenv": 60}
    )


class EnvService:
    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.instances: dict[str, _Instance] = {}
        self.guard = threading.Lock()
        self.reserved = 0  # /create calls between their limit check and their insert
        self.reserved_heavy: dict[str, int] = {}  # the same, per heavy environment
        self.starts: dict[str, deque[float]] = {}  # per heavy environment, the start times of the last minute
        self.profiles: dict[str, list[EnvProfile]] = {}
        self.profile_lock = threading.Lock()

    def served(self, name: str) -> None:
        """403 for an environment this service was not started to serve."""
        envs = self.settings.envs
        if envs is not None and name not in envs:
            raise HTTPException(403, f"environment '{name[:64]}' is not served here (served: {', '.join(envs)})")

    def reserve(self, env_name: str = "") -> None:
        """Claim a slot for a new instance, or 503 — atomically, so concurrent creates never exceed the limit (and
        a heavy environment's own limit)."""
        with self.guard:
            if len(self.instances) + self.reserved >= self.settings.max_instances:
                raise HTTPException(503, f"instance limit {self.settings.max_instances} reached; release some")
            heavy = self.settings.heavy_limits.get(env_name)
            if heavy is not None:
                live = sum(i.env_name == env_name for i in self.instances.values())
                if live + self.reserved_heavy.get(env_name, 0) >= heavy:
                    raise HTTPException(503, f"instance limit of '{env_name}' ({heavy}) reached; release some")
            self._rate(env_name)
            if heavy is not None:
                self.reserved_heavy[env_name] = self.reserved_heavy.get(env_name, 0) + 1
            self.reserved += 1

    def _rate(self, env_name: str, now: float | None = None) -> None:
        """429 with Retry-After when a heavy environment already started its per-minute quota of instances (a cap
        bounds how many live at once; this bounds how fast a client can make the service start JVMs)."""
        rate = self.settings.heavy_starts_per_minute.get(env_name)
        if rate is None:
            return
        now = time.monotonic() if now is None else now
        recent = self.starts.setdefault(env_name, deque())
        while recent and now - recent[0] >= 60.0:
            recent.popleft()
        if len(recent) >= rate:
            wait = max(1, int(60.0 - (now - recent[0])) + 1)
            raise HTTPException(
                429, f"'{env_name}' started {rate} instances in the last minute; retry later",
                headers={"Retry-After": str(wait)},
            )  # fmt: skip
        recent.append(now)

    def unreserve(self, env_name: str = "") -> None:
        with self.guard:
            self.reserved -= 1
            if env_name in self.reserved_heavy:
                self.reserved_heavy[env_name] -= 1

    def profile(self, name: str) -> list[EnvProfile]:
        """An environment's profiles, computed once per service (a JVM-backed profile took 4.2 s each time)."""
        with self.profile_lock:
            if name not in self.profiles:
                self.profiles[name] = make_env(EnvConfig(name=name)).profile()
            return self.profiles[name]

    def get(self, instance_id: str) -> _Instance:
        inst = self.instances.get(instance_id)
        if inst is None:
            raise HTTPException(404, f"unknown instance_id '{instance_id}' (expired or released?)")
        if inst.broken:
            raise HTTPException(409, f"instance '{instance_id}' is broken ({inst.broken}); release it")
        inst.last_used = time.monotonic()
        return inst

    def reap(self) -> int:
        now = time.monotonic()
        with self.guard:
            stale = [k for k, v in self.instances.items() if now - v.last_used > self.settings.idle_ttl_s]
            gone = [self.instances.pop(k) for k in stale]
        for inst in gone:  # closed outside the lock: a JVM's shutdown must not hold up every create and release
            _close_quietly(inst.env)
        if stale:
            log.info("reaped %d idle instances", len(stale))
        return len(stale)


MAX_DETAIL = 500  # characters of an error reply's detail
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
M = TypeVar("M", bound=BaseModel)


class _Handlers:
    """What the routes share: the service and its settings, upstream's task index, the body decoders, the bearer
    check, instance creation under its deadline and calls under theirs."""

    def __init__(self, settings: ServiceSettings, service: EnvService) -> None:
        self.settings, self.service = settings, service
        self.tasks = upstream.TaskIndex()  # upstream's /create names tasks by id: looked up among ours only
        self.decoders: list[anyio.CapacityLimiter] = []  # made on first use, inside the event loop

    def auth(self, request: Request) -> None:
        if self.settings.token is None:
            return
        header = request.headers.get("authorization", "")
        if not secrets.compare_digest(header, f"Bearer {self.settings.token}"):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    async def read_any(self, request: Request, model: type[M]) -> M | upstream.UpstreamRequest:
        """The request's body as ``model``, or as upstream AgentEvolver's request when it is one; decoded,
        depth-checked and validated in a worker thread: a large body's parsing never holds the event loop, which
        keeps answering other requests (/healthz) meanwhile."""
        return await self._decoded(request, model, True)

    async def read(self, request: Request, model: type[M]) -> M:
        """The request's body as ``model`` (an upstream-shaped body is validated as ``model`` too)."""
        return cast(M, await self._decoded(request, model, False))

    async def _decoded(self, request: Request, model: type[M], foreign: bool) -> M | upstream.UpstreamRequest:
        if not self.decoders:
            self.decoders.append(anyio.CapacityLimiter(self.settings.decode_workers))
        raw = await request.body()
        return await anyio.to_thread.run_sync(
            _validated, raw, self.settings.max_body_depth, model, foreign, limiter=self.decoders[0]
        )

    async def new_instance(
        self, env_cfg: EnvConfig, reset_fn, instance_id: str | None = None, task_id: str = ""
    ) -> tuple[str, Any]:
        """Reserve a slot, build the environment and reset it off the event loop, and register the instance."""
        settings, service = self.settings, self.service
        env_name = env_cfg.name
        service.served(env_name)
        service.reserve(env_name)
        at = time.monotonic() + settings.create_timeout_s
        handover = threading.Lock()
        abandoned = False  # set when the request gave up: an environment finished after that is closed, not leaked

        def build() -> tuple[Environment, Any]:
            """Build and reset under the request's deadline; whatever fails, is cancelled or comes too late closes
            its own environment."""
            env: Environment | None = None
            try:
                with cancel.deadline(at):
                    env = make_env(env_cfg)
                    reset = reset_fn(env)
                with handover:
                    if abandoned:
                        raise cancel.Cancelled("built after its request's deadline")
                    return env, reset
            except BaseException:
                if env is not None:
                    env.close()
                raise

        try:
            try:
                env, reset = await asyncio.wait_for(run_in_threadpool(build), timeout=settings.create_timeout_s)
            except (asyncio.TimeoutError, cancel.Cancelled):  # whichever comes first at the deadline
                with handover:
                    abandoned = True
                raise HTTPException(
                    504, f"building and resetting the environment exceeded {settings.create_timeout_s}s"
                ) from None
            except EvolveKitError as err:
                raise HTTPException(400, str(err)) from None
            except (ValueError, TypeError) as err:  # a simulator refusing its sandbox_config in its own words
                raise HTTPException(400, f"invalid request body at 'sandbox_config': {str(err)[:200]}") from None
            with service.guard:
                if instance_id is None or instance_id in service.instances:
                    instance_id = uuid.uuid4().hex
                service.instances[instance_id] = _Instance(
                    env=env, task_id=task_id, env_name=env_name, tools=list(reset.tools)
                )
        finally:
            service.unreserve(env_name)
        return instance_id, reset

    async def guarded(self, inst: _Instance, fn, *args):
        """``fn(*args)`` on the instance, one call at a time, under the step timeout (504 past it: the instance is
        marked broken and its environment closed beside the call)."""
        timeout = self.settings.step_timeout_s
        at = time.monotonic() + timeout

        def run():
            with inst.lock, cancel.deadline(at):  # one call at a time per instance; stops at its deadline
                return fn(*args)

        try:
            return await asyncio.wait_for(run_in_threadpool(run), timeout=timeout)
        except (asyncio.TimeoutError, cancel.Cancelled):  # whichever comes first at the deadline
            inst.broken = f"a call exceeded the {timeout}s step timeout"
            # a call that cannot check in (a simulator's step inside its JVM, a server's reply) ends when its
            # environment goes: close it now, beside the call, instead of letting the call run on unowned
            threading.Thread(target=_close_quietly, args=(inst.env,), name="close-broken", daemon=True).start()
            raise HTTPException(504, inst.broken) from None
        except EvolveKitError as err:
            raise HTTPException(400, str(err)) from None

    def upstream_instance(self, req: upstream.UpstreamRequest) -> tuple[str, _Instance]:
        if not req.instance_id:
            raise HTTPException(422, "invalid request body at 'instance_id': an instance id is required")
        return req.instance_id, self.service.get(req.instance_id)

    async def upstream_create(self, req: upstream.UpstreamRequest) -> dict:
        if not req.task_id:
            raise HTTPException(422, "invalid request body at 'task_id': a task id is required")
        if req.instance_id is not None and not _SAFE_ID.fullmatch(req.instance_id):
            raise HTTPException(422, "invalid request body at 'instance_id': 1-64 letters, digits, '-' or '_'")
        self.service.served(req.env_type)
        try:
            task = await run_in_threadpool(self.tasks.find, req.env_type, req.task_id, req.params)
        except LookupError as err:
            raise HTTPException(404, str(err)) from None
        except EvolveKitError as err:
            raise HTTPException(400, str(err)) from None
        instance_id, reset = await self.new_instance(
            EnvConfig(name=req.env_type), lambda env: env.reset(task), req.instance_id, task.task_id
        )
        state = upstream.initial_state(reset)
        return upstream.reply(upstream.episode(state, 0.0, False, instance_id, task.task_id))


def _add_error_handlers(app: FastAPI) -> None:
    """Short error bodies: every detail at most MAX_DETAIL characters, a validation error naming its field."""

    @app.exception_handler(HTTPException)
    async def short_detail(request: Request, exc: HTTPException):
        """Every error's detail at most 500 characters: a 4xx names the field, it does not echo the input back."""
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if len(detail) > MAX_DETAIL:
            detail = detail[:MAX_DETAIL] + f"... ({len(detail) - MAX_DETAIL} more characters)"
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid body"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(
            {"detail": f"invalid request body at '{where[:200]}': {str(first.get('msg'))[:300]}", "errors": len(errs)},
            status_code=422,
        )


def _status_routes(h: _Handlers) -> APIRouter:
    """/healthz (no token) and /profile."""
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> dict:
        return {"ok": True, "instances": len(h.service.instances)}

    @router.get("/profile", dependencies=[Depends(h.auth)])
    async def profile(env: str = h.settings.default_env) -> list[EnvProfile]:
        h.service.served(env)
        try:
            return await run_in_threadpool(h.service.profile, env)  # off the event loop: /healthz keeps answering
        except EvolveKitError as err:
            raise HTTPException(400, str(err)) from None

    return router


def _instance_routes(h: _Handlers) -> APIRouter:
    """An instance's life: /create, /step, /evaluate, /info, /release (each also answering upstream's body)."""
    router = APIRouter(dependencies=[Depends(h.auth)])

    @router.post("/create")
    async def create(request: Request):
        req = await h.read_any(request, CreateRequest)
        if isinstance(req, upstream.UpstreamRequest):
            return await h.upstream_create(req)
        env_cfg = EnvConfig(name=req.env, backends=req.backends)
        instance_id, reset = await h.new_instance(env_cfg, lambda env: env.reset(req.task, req.sandbox_config))
        return CreateResponse(instance_id=instance_id, reset=reset)

    @router.post("/step")
    async def step(request: Request):
        req = await h.read_any(request, StepRequest)
        if isinstance(req, upstream.UpstreamRequest):
            iid, inst = h.upstream_instance(req)
            try:
                text = upstream.assistant_text(req.messages)
            except ValueError as err:
                raise HTTPException(422, f"invalid request body at 'messages': {err}") from None
            result: StepResult = await h.guarded(inst, inst.env.step, parse_action(text))
            state = upstream.step_state(result)
            return upstream.reply(upstream.episode(state, result.reward, result.done, iid, inst.task_id))
        inst = h.service.get(req.instance_id)
        return await h.guarded(inst, inst.env.step, req.action)

    @router.post("/evaluate")
    async def evaluate(request: Request):
        req = await h.read_any(request, InstanceRequest)
        if isinstance(req, upstream.UpstreamRequest):
            _, inst = h.upstream_instance(req)
            result: EvalResult = await h.guarded(inst, inst.env.evaluate)
            return upstream.reply(result.score)
        inst = h.service.get(req.instance_id)
        return await h.guarded(inst, inst.env.evaluate)

    @router.post("/info")
    async def info(request: Request) -> EnvInfo:
        req = await h.read(request, InstanceRequest)
        return h.service.get(req.instance_id).env.info()

    @router.post("/release")
    async def release(request: Request) -> dict:
        req = await h.read_any(request, InstanceRequest)
        foreign = isinstance(req, upstream.UpstreamRequest)
        req_id = req.instance_id
        if not req_id:
            raise HTTPException(422, "invalid request body at 'instance_id': an instance id is required")
        with h.service.guard:  # a broken instance can be released too
            inst = h.service.instances.pop(req_id, None)
        if inst is None:
            raise HTTPException(404, f"unknown instance_id '{req_id}'")
        await run_in_threadpool(_close_quietly, inst.env)  # a JVM's shutdown takes a while: not on the event loop
        return upstream.reply(True) if foreign else {"released": req_id}

    return router


def _upstream_routes(h: _Handlers) -> APIRouter:
    """Upstream AgentEvolver's own routes: /get_info and /get_env_profile."""
    router = APIRouter(dependencies=[Depends(h.auth)])

    @router.post("/get_info")
    async def get_info(request: Request) -> dict:
        _, inst = h.upstream_instance(await h.read(request, upstream.UpstreamRequest))
        tools = [t.model_dump(mode="json") for t in inst.tools]
        return upstream.reply({"tools": tools, "info": inst.env.info().model_dump(mode="json")})

    @router.post("/get_env_profile")
    async def get_env_profile(request: Request) -> dict:
        req = await h.read(request, upstream.UpstreamRequest)
        split = req.params.get("split", "train")
        family = req.params.get("family")
        if split not in upstream.SPLITS or not (family is None or isinstance(family, str)):
            raise HTTPException(422, f"invalid request body at 'params': split one of {', '.join(upstream.SPLITS)}")
        try:
            found = await run_in_threadpool(h.tasks.split, req.env_type, split, family)
        except EvolveKitError as err:
            raise HTTPException(400, str(err)) from None
        return upstream.reply(list(found))

    return router


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """The service's app: its reaper, body and origin guards, short error bodies, and the routes by concern."""
    settings = settings or ServiceSettings()
    service = EnvService(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        async def reaper() -> None:
            while True:
                await asyncio.sleep(settings.reap_interval_s)
                await run_in_threadpool(service.reap)  # closing JVMs and server processes: off the event loop

        task = asyncio.create_task(reaper())
        yield
        task.cancel()

    app = FastAPI(title="evolvekit environment service", version="1", lifespan=lifespan)
    app.state.service = service
    app.add_middleware(BodyLimit, max_bytes=settings.max_call_body_bytes, larger={"/create": settings.max_body_bytes})
    app.add_middleware(OriginGuard, allowed_hosts=settings.allowed_hosts)
    _add_error_handlers(app)
    handlers = _Handlers(settings, service)
    for router in (_status_routes(handlers), _instance_routes(handlers), _upstream_routes(handlers)):
        app.include_router(router)
    return app


def _close_quietly(env: Environment) -> None:
    """Close an environment, logging (not raising) what its close raises: it may already be gone, or be closed
    twice (after a step past its deadline, and at release)."""
    try:
        env.close()
    except Exception as err:  # noqa: BLE001 - whatever a plugin's close raises, the instance is gone
        log.warning("closing an environment raised %s: %s", type(err).__name__, err)


def host_name(header: str) -> str:
    """The name of a Host header without its port: ``127.0.0.1:8765`` -> ``127.0.0.1``, ``[::1]:80`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class OriginGuard:
    """ASGI middleware against a web page driving the service: 421 for a ``Host`` header that names no allowed host
    (DNS rebinding), 415 for a request with a body that is not ``application/json`` (a cross-site form or
    ``text/plain`` POST needs no CORS preflight; a JSON one does, and this service answers none). Repeated slashes
    in the path are collapsed first, so upstream AgentEvolver's ``//get_env_profile`` reaches its route."""

    def __init__(self, app, allowed_hosts: tuple[str, ...]) -> None:
        self.app, self.allowed = app, {h.lower() for h in allowed_hosts}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path") or "/"
        if "//" in path:  # upstream's client asks for //get_env_profile (a base URL ending in '/'): one route
            scope = {**scope, "path": re.sub(r"/{2,}", "/", path)}
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if host_name(host) not in self.allowed:
            return await _answer(send, 421, f"Host header names no host this service answers for: {host[:80]!r}")
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            ctype = headers.get(b"content-type", b"").decode("latin-1").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return await _answer(send, 415, f"Content-Type must be application/json, not {ctype[:60]!r}")
        await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: reads the body as it arrives and answers 413 past ``max_bytes`` (or the path's own limit in
    ``larger``), whether the client sent a ``Content-Length`` or chunks; 400 for a malformed ``Content-Length``. The
    buffered body is then handed on to the app unchanged (decoding it is the endpoint's, off the event loop:
    ``_validated``)."""

    def __init__(self, app, max_bytes: int, larger: dict[str, int] | None = None) -> None:
        self.app, self.max_bytes, self.larger = app, max_bytes, dict(larger or {})

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.larger.get(scope.get("path") or "/", self.max_bytes)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return await _answer(send, 400, "malformed Content-Length header")
            if int(length) > limit:
                return await _answer(send, 413, f"request body over {limit} bytes")
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await _answer(send, 413, f"request body over {limit} bytes")
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _validated(raw: bytes, max_depth: int, model: type[M], foreign: bool) -> M | upstream.UpstreamRequest:
    """A request body decoded and validated (run in a worker thread): 422 when it is not JSON, when it nests deeper
    than ``max_depth`` (naming where) or when it fails ``model``'s schema (naming the field). With ``foreign``, a
    body that is upstream AgentEvolver's (``env_type``) is validated as upstream's request instead."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise HTTPException(422, f"invalid request body at '(root)': nested deeper than {max_depth} levels") from None
    except ValueError:
        raise HTTPException(422, "invalid request body: not JSON") from None
    where = None if surely_shallow(raw, max_depth) else json_depth_path(body, max_depth)
    if where is not None:
        raise HTTPException(422, f"invalid request body at '{where}': nested deeper than {max_depth} levels")
    target: type[BaseModel] = upstream.UpstreamRequest if foreign and upstream.is_upstream(body) else model
    try:
        return target.model_validate(body)  # type: ignore[return-value]
    except ValidationError as err:
        raise RequestValidationError(err.errors()) from None


async def _answer(send, status: int, detail: str) -> None:
    async def no_body() -> dict:  # the response never reads the request
        return {"type": "http.disconnect"}

    await JSONResponse({"detail": detail}, status_code=status)({"type": "http"}, no_body, send)


def serve(host: str = "127.0.0.1", port: int = 8765, settings: ServiceSettings | None = None) -> None:
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
