"""Rollout engines by name (``models.policy.engine``): the built-in backends of ``engine/backends/`` and any a plugin
registers (``register_engine`` in a module named by ``env.plugins``). Config validation (``engine_problem``, asked by
`run` and `config validate` alike), `config show` (``engine_settings``) and the builder (``rollout_engine``, the one
place an engine over the trained policy is made) all read this table."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ValidationError

from evolvekit.config import Config
from evolvekit.engine.backends import continuous, native, sglang, vllm
from evolvekit.engine.base import Engine
from evolvekit.engine.spec import EngineBackend, EngineRequest

if TYPE_CHECKING:
    from evolvekit.llm.base import LLM
    from evolvekit.llm.local import LocalLLM

ENGINES: dict[str, EngineBackend] = {}


def register_engine(backend: EngineBackend) -> EngineBackend:
    """Add ``backend`` under its name; a second backend under a name taken already is refused."""
    if backend.name in ENGINES and ENGINES[backend.name] is not backend:
        raise ValueError(f"engine '{backend.name}' is already registered")
    ENGINES[backend.name] = backend
    return backend


for _module in (native, continuous, vllm, sglang):
    register_engine(_module.BACKEND)


def engine_settings() -> dict[str, tuple[str, ...]]:
    """Each registered engine's own ``models.policy`` fields (`config show` hides them under another engine);
    ``engine_options`` counts for an engine that declares an options model."""
    return {name: b.settings + (("engine_options",) if b.options else ()) for name, b in ENGINES.items()}


def engine_problem(cfg: Config, training: bool = True) -> str | None:
    """The first rule ``cfg``'s rollout engine breaks, as one line naming the fields, else None: an unknown engine;
    one other than native where Ray workers or Evolving-RL's stages sample (they run the native engine); an engine
    that holds its own copy of the weights beside a served policy or a LoRA adapter; an explicit device the engine
    does not run on; the engine's own rules; its options. For evaluation alone (``training`` false) the rules of
    training's stages do not apply, and a served policy samples through its server (its engine is not built)."""
    pol = cfg.models.policy
    if not training and pol.backend != "local":
        return None
    backend = ENGINES.get(pol.engine)
    if backend is None:
        known = ", ".join(sorted(ENGINES))
        return f"models.policy.engine: unknown engine '{pol.engine}' (registered: {known}; env.plugins)"
    if training and pol.engine != "native" and (cfg.rollout.backend == "ray" or cfg.evolving_rl.enabled):
        return (
            f"models.policy.engine: {pol.engine} serves the rollouts of rollout.backend: local without "
            "evolving_rl (Ray workers and Evolving-RL's stages run the native engine); use engine: native"
        )
    if pol.engine != "native" and pol.backend != "local":
        return (
            f"models.policy.engine: {pol.engine} samples for the in-process policy it is trained beside; it needs "
            "models.policy.backend: local"
        )
    kind = pol.device.split(":")[0]
    if pol.device != "auto" and kind not in backend.devices:
        return f"models.policy.engine: {pol.engine} runs on {', '.join(backend.devices)} (not {kind})"
    if training and backend.holds_weights and cfg.train.lora:
        return (
            f"models.policy.engine: {pol.engine} with train.lora is not supported yet (the adapter would have to be "
            "merged before each weight push); use engine: native or train.lora: false"
        )
    problem = backend.problem(pol)
    if problem is not None:
        return problem
    try:
        _options(backend, pol.engine_options)
    except ValueError as err:
        return str(err)
    return None


def _options(backend: EngineBackend, given: dict) -> BaseModel | None:
    """``models.policy.engine_options`` validated by the engine's options model (an error names the option)."""
    if backend.options is None:
        if given:
            names = ", ".join(sorted(given))
            raise ValueError(f"models.policy.engine_options: engine {backend.name} takes no options (given: {names})")
        return None
    try:
        return backend.options.model_validate(given)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"models.policy.engine_options.{where}: {first['msg']}") from None


def seam(backend: LLM) -> Engine:
    """The seam over a backend built already: a helper role's model (explorer, synthesizer, summariser), a Ray
    worker's copy of the policy, the policy itself where a trainer or a command is given no rollout engine. Its
    capabilities are found once, here. Every ``Engine`` in evolvekit is made in this module (a test reads the source):
    here, by ``rollout_engine`` (the configured backend over the trained policy) or by ``policy_engine``."""
    return Engine(backend)


def rollout_engine(cfg: Config, policy: LocalLLM) -> Engine:
    """The configured rollout engine over the trained ``policy``, wrapped once (its capabilities found here)."""
    pol = cfg.models.policy
    backend = ENGINES[pol.engine]  # engine_problem named an unknown one before anything was built
    options = _options(backend, pol.engine_options)
    return Engine(backend.build(EngineRequest(pol, policy, cfg.run.seed, options)))


def policy_engine(cfg: Config, policy: LLM) -> Engine:
    """The engine the policy samples through where no trainer built one (`eval`, `tasks synthesize`'s pass probe):
    the configured rollout engine over an in-process policy, or a served policy itself (its server is its
    engine)."""
    if cfg.models.policy.backend != "local":
        return seam(policy)
    return rollout_engine(cfg, cast("LocalLLM", policy))
