"""Environments registered by name and built from config."""

from __future__ import annotations

from typing import Callable

from evolvekit.config import EnvConfig
from evolvekit.env.base import Environment
from evolvekit.errors import EnvError

_REGISTRY: dict[str, tuple[Callable[[EnvConfig], Environment], str]] = {}


def register_env(name: str, description: str = ""):
    def deco(factory: Callable[[EnvConfig], Environment]):
        _REGISTRY[name] = (factory, description)
        return factory

    return deco


def _load_builtins() -> None:
    import evolvekit.env.bfcl.env  # noqa: F401  (registers "bfcl")
    import evolvekit.env.scienceworld  # noqa: F401  (registers "scienceworld")


def available_envs() -> dict[str, str]:
    _load_builtins()
    return {name: desc for name, (_, desc) in sorted(_REGISTRY.items())}


def make_env(cfg: EnvConfig | str) -> Environment:
    """Build an environment from config; with ``env.service_url`` set, a client of the environment service."""
    _load_builtins()
    if isinstance(cfg, str):
        cfg = EnvConfig(name=cfg)
    if cfg.service_url:
        from evolvekit.env.service.client import RemoteEnv

        return RemoteEnv.from_config(cfg)
    if cfg.name not in _REGISTRY:
        raise EnvError(f"unknown environment '{cfg.name}' (env.name); available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[cfg.name][0](cfg)
