"""Scale-out on Ray (optional extra ``ray``): rollout workers and environment instances as Ray actors.

``RayRolloutPool`` splits the jobs of a batch over ``rollout.ray_workers`` worker actors; each worker runs the same
lock-step batched rollout loop as the local backend, with its environments hosted in their own ``EnvActor``s
(``RayEnv`` is the driver-side proxy implementing the ``Environment`` protocol). A local policy's current weights
are shipped to the workers through the object store before each batch (``sync_weights``), so rollouts always come
from the policy being trained; an OpenAI-compatible policy needs no sync (the server serves the weights).
Nothing here is a home-made scheduler: placement, transport and failure handling are Ray's.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict

from evolvekit.config import Config, EnvConfig, PolicyModelConfig, RolloutConfig
from evolvekit.errors import ConfigError
from evolvekit.llm.base import SamplingParams
from evolvekit.types import ChatMessage, Trajectory

log = logging.getLogger(__name__)


def _ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "rollout.backend: ray needs the 'ray' extra (pip install -c constraints.txt 'evolvekit[ray]')"
        ) from None
    return ray


def init_ray(address: str | None = None, num_cpus: float | None = None, runtime_env: dict | None = None) -> None:
    """Connect to ``address`` or start a local Ray bound to 127.0.0.1 (idempotent)."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    else:
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            runtime_env=runtime_env,
            log_to_driver=False,
            configure_logging=False,
        )


class _EnvActorImpl:
    def __init__(self, env_cfg_json: str) -> None:
        from evolvekit.env.registry import make_env

        self.env = make_env(EnvConfig.model_validate_json(env_cfg_json))

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.env, method)(*args)


class RayEnv:
    """Driver- or worker-side proxy of an environment living in an ``EnvActor``."""

    def __init__(self, env_cfg: EnvConfig, num_cpus: float = 0.1) -> None:
        ray = _ray()
        actor_cls = ray.remote(num_cpus=num_cpus)(_EnvActorImpl)
        self._ray = ray
        self.actor = actor_cls.remote(env_cfg.model_dump_json())
        self.name = env_cfg.name

    def _call(self, method: str, *args: Any) -> Any:
        return self._ray.get(self.actor.call.remote(method, *args))

    def profile(self):
        return self._call("profile")

    def reset(self, task=None, sandbox_config=None):
        return self._call("reset", task, sandbox_config)

    def step(self, action):
        return self._call("step", action)

    def evaluate(self, trajectory=None):
        return self._call("evaluate", trajectory)

    def info(self):
        return self._call("info")

    def close(self) -> None:
        try:
            self._call("close")
        finally:
            self._ray.kill(self.actor)


class WorkerSpec(BaseModel):
    """What a rollout worker reads of the run's config (``of``), shipped to each worker as JSON: the policy's model,
    the environment, the rollout section (Ray's settings among them) and the LoRA rank of the weights it loads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: PolicyModelConfig
    env: EnvConfig
    rollout: RolloutConfig
    lora_rank: int = 16

    @classmethod
    def of(cls, cfg: Config) -> WorkerSpec:
        return cls(policy=cfg.models.policy, env=cfg.env, rollout=cfg.rollout, lora_rank=cfg.train.lora_rank)


class _WorkerImpl:
    """A rollout worker actor: its own LLM client (or local model copy) and environment actors."""

    def __init__(self, spec_json: str, env_actors: bool) -> None:
        import os

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from evolvekit.llm.factory import build_llm

        self.spec = WorkerSpec.model_validate_json(spec_json)
        from evolvekit.engine.registry import seam

        self.llm = build_llm(self.spec.policy, "policy")
        self.engine = seam(self.llm)  # capabilities found once
        self.env_actors = env_actors

    def load_weights(self, kind: str, state: dict) -> bool:
        """The driver's policy: every weight, or (LoRA) the adapter weights only, into this worker's copy."""
        from evolvekit.llm.lora import load_policy_weights

        if not self.engine.caps.in_process:
            return False
        self.llm.model = load_policy_weights(self.engine.model, kind, state, self.spec.lora_rank)  # type: ignore[attr-defined]
        self.engine.reset_prefix_cache()
        return True

    def run(self, jobs, params: SamplingParams, examples: list[ChatMessage] | None = None) -> list[Trajectory]:
        """The jobs' episodes; ``examples``: the worked examples the run's prompts show (its own, made by the driver),
        None for the environment's (``env.worked_examples: person``: ``make_env`` shows them then)."""
        from evolvekit.agent.rollout import run_rollouts
        from evolvekit.env.examples import ShownExamples
        from evolvekit.env.registry import make_env

        spec = self.spec

        def bare():
            return RayEnv(spec.env, spec.rollout.ray_env_cpus) if self.env_actors else make_env(spec.env)

        def make():
            env = bare()
            return env if examples is None else ShownExamples(env, lambda: examples)

        return run_rollouts(jobs, make, self.engine, spec.rollout, params, spec.env.tool_rendering, show_progress=False)


def worker_gpus(requested: float | None, cluster_gpus: float, workers: int) -> float:
    """GPUs per rollout worker: as configured, or (None) an equal share of the cluster's GPUs, at most one each."""
    if requested is not None:
        return requested
    return min(1.0, cluster_gpus / workers) if cluster_gpus > 0 else 0.0


class RayRolloutPool:
    """Rollouts on Ray workers (``rollout.backend: ray``); each worker builds its policy and environments from the
    ``WorkerSpec`` it is sent (not the whole config)."""

    def __init__(
        self,
        spec: WorkerSpec,
        env_actors: bool = True,
        runtime_env: dict | None = None,
        examples: Callable[[], list[ChatMessage]] | None = None,
    ) -> None:
        """``examples``: the run's own worked examples (made once by the driver), sent with every batch so that a
        worker's prompts show what the driver's do; None = the environment's own."""
        ray = _ray()
        self.examples = examples
        ro = spec.rollout
        init_ray(ro.ray_address, runtime_env=runtime_env)
        self._ray = ray
        n = max(1, ro.ray_workers)
        self.gpus = worker_gpus(ro.ray_worker_gpus, ray.cluster_resources().get("GPU", 0.0), n)
        worker_cls = ray.remote(num_cpus=ro.ray_worker_cpus, num_gpus=self.gpus)(_WorkerImpl)
        self.workers = [worker_cls.remote(spec.model_dump_json(), env_actors) for _ in range(n)]
        self.shipped_tensors = 0  # tensors of the last sync (LoRA: the adapters only)

    def sync_weights(self, model) -> None:
        """Ship the driver's current policy to every worker (one object-store copy): every weight, or with LoRA
        only the adapter weights."""
        from evolvekit.llm.lora import policy_weights

        kind, state = policy_weights(model)
        self.shipped_tensors = len(state)
        ref = self._ray.put(state)
        self._ray.get([w.load_weights.remote(kind, ref) for w in self.workers])

    def run(self, jobs: Sequence, params: SamplingParams) -> list[Trajectory]:
        """Run ``jobs`` split over the workers; results come back in job order."""
        n = len(self.workers)
        chunks = [list(jobs[i::n]) for i in range(n)]
        shown = self.examples() if self.examples is not None else None
        futures = [w.run.remote(chunk, params, shown) for w, chunk in zip(self.workers, chunks) if chunk]
        parts = self._ray.get(futures)
        out: list[Trajectory | None] = [None] * len(jobs)
        for w_idx, part in enumerate(parts):
            for j, traj in enumerate(part):
                out[w_idx + j * n] = traj
        return [t for t in out if t is not None]

    def shutdown(self) -> None:
        for w in self.workers:
            self._ray.kill(w)
        self.workers = []
