"""FastAPI server exposing /create, /step, /evaluate, /info, /profile, /release and /healthz.

Binds 127.0.0.1 by default. With a token configured, every request but /healthz needs
``Authorization: Bearer <token>`` (401 otherwise). Bodies over ``max_body_bytes`` get 413; bodies that fail
schema validation get 422 naming the field. Each step runs under a timeout (504 when exceeded; the instance is
then marked broken and must be released). Instances idle for longer than ``idle_ttl_s`` are reaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from evolvekit.config import EnvConfig
from evolvekit.env.base import EnvInfo, EnvProfile, Environment, EvalResult, StepResult
from evolvekit.env.registry import make_env
from evolvekit.env.service.schemas import CreateRequest, CreateResponse, InstanceRequest, StepRequest
from evolvekit.errors import EvolveKitError

log = logging.getLogger(__name__)


@dataclass
class _Instance:
    env: Environment
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    broken: str | None = None


@dataclass
class ServiceSettings:
    token: str | None = None
    step_timeout_s: float = 10.0
    idle_ttl_s: float = 600.0
    reap_interval_s: float = 30.0
    max_body_bytes: int = 2_000_000
    max_instances: int = 1024
    default_env: str = "bfcl"


class EnvService:
    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.instances: dict[str, _Instance] = {}
        self.guard = threading.Lock()

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
            for k in stale:
                self.instances.pop(k).env.close()
        if stale:
            log.info("reaped %d idle instances", len(stale))
        return len(stale)


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    settings = settings or ServiceSettings()
    service = EnvService(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        async def reaper() -> None:
            while True:
                await asyncio.sleep(settings.reap_interval_s)
                service.reap()

        task = asyncio.create_task(reaper())
        yield
        task.cancel()

    app = FastAPI(title="evolvekit environment service", version="1", lifespan=lifespan)
    app.state.service = service

    def auth(request: Request) -> None:
        if settings.token is None:
            return
        header = request.headers.get("authorization", "")
        if not secrets.compare_digest(header, f"Bearer {settings.token}"):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and int(length) > settings.max_body_bytes:
            return JSONResponse({"detail": f"request body over {settings.max_body_bytes} bytes"}, status_code=413)
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid body"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse({"detail": f"invalid request body at '{where}': {first.get('msg')}", "errors": len(errs)},
                            status_code=422)

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"ok": True, "instances": len(service.instances)}

    @app.get("/profile", dependencies=[Depends(auth)])
    async def profile(env: str = settings.default_env) -> list[EnvProfile]:
        try:
            e = make_env(EnvConfig(name=env))
        except EvolveKitError as err:
            raise HTTPException(400, str(err)) from None
        return e.profile()

    @app.post("/create", dependencies=[Depends(auth)])
    async def create(req: CreateRequest) -> CreateResponse:
        if len(service.instances) >= settings.max_instances:
            raise HTTPException(503, f"instance limit {settings.max_instances} reached; release some")
        try:
            env = make_env(EnvConfig(name=req.env, backends=req.backends))
            reset = await run_in_threadpool(env.reset, req.task, req.sandbox_config)
        except EvolveKitError as err:
            raise HTTPException(400, str(err)) from None
        instance_id = uuid.uuid4().hex
        with service.guard:
            service.instances[instance_id] = _Instance(env=env)
        return CreateResponse(instance_id=instance_id, reset=reset)

    async def _guarded(inst: _Instance, fn, *args):
        def run():
            with inst.lock:  # one call at a time per instance
                return fn(*args)

        try:
            return await asyncio.wait_for(run_in_threadpool(run), timeout=settings.step_timeout_s)
        except asyncio.TimeoutError:
            inst.broken = f"a call exceeded the {settings.step_timeout_s}s step timeout"
            raise HTTPException(504, inst.broken) from None
        except EvolveKitError as err:
            raise HTTPException(400, str(err)) from None

    @app.post("/step", dependencies=[Depends(auth)])
    async def step(req: StepRequest) -> StepResult:
        inst = service.get(req.instance_id)
        return await _guarded(inst, inst.env.step, req.action)

    @app.post("/evaluate", dependencies=[Depends(auth)])
    async def evaluate(req: InstanceRequest) -> EvalResult:
        inst = service.get(req.instance_id)
        return await _guarded(inst, inst.env.evaluate)

    @app.post("/info", dependencies=[Depends(auth)])
    async def info(req: InstanceRequest) -> EnvInfo:
        return service.get(req.instance_id).env.info()

    @app.post("/release", dependencies=[Depends(auth)])
    async def release(req: InstanceRequest) -> dict:
        with service.guard:
            inst = service.instances.pop(req.instance_id, None)
        if inst is None:
            raise HTTPException(404, f"unknown instance_id '{req.instance_id}'")
        inst.env.close()
        return {"released": req.instance_id}

    return app


def serve(host: str = "127.0.0.1", port: int = 8765, settings: ServiceSettings | None = None) -> None:
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
