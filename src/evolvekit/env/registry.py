"""Environments registered by name and built from config."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Callable, Sequence, cast

from evolvekit.config import EnvConfig
from evolvekit.env.base import Environment
from evolvekit.errors import EnvError
from evolvekit.types import Task

log = logging.getLogger(__name__)

_REGISTRY: dict[str, tuple[Callable[[EnvConfig], Environment], str]] = {}
_TASKS: dict[str, Callable[[EnvConfig, str], list[Task]]] = {}
_AVAILABLE: dict[str, Callable[[EnvConfig], bool]] = {}
_ACTION_STOP: dict[str, tuple[str, ...]] = {}
_ACTION_TOKENS: dict[str, int] = {}


def register_env(
    name: str, description: str = "", action_stop: Sequence[str] = (), action_max_tokens: int | None = None
):
    """Register ``factory(env_cfg) -> Environment`` under ``name``. ``action_stop``: strings that end a policy's
    action in this environment (a text-action simulator whose action is one line: ``("\n",)``), so a step's
    generation stops there instead of running to ``models.policy.max_new_tokens``; ``action_max_tokens``: the
    longest action it takes (``env.action_max_tokens`` overrides it)."""

    def deco(factory: Callable[[EnvConfig], Environment]):
        _REGISTRY[name] = (factory, description)
        _ACTION_STOP[name] = tuple(action_stop)
        if action_max_tokens is not None:
            _ACTION_TOKENS[name] = action_max_tokens
        return factory

    return deco


def action_stop(cfg: EnvConfig) -> tuple[str, ...]:
    """The strings that end one action in ``cfg``'s environment (none for tool-call environments, whose calls end at
    their closing tag)."""
    _load_builtins()
    load_plugins(cfg.plugins)
    return _ACTION_STOP.get(cfg.name, ())


def action_max_tokens(cfg: EnvConfig) -> int | None:
    """``env.action_max_tokens``, else the environment's registered action length, else None (no cap of its own)."""
    if cfg.action_max_tokens is not None:
        return cfg.action_max_tokens
    _load_builtins()
    load_plugins(cfg.plugins)
    return _ACTION_TOKENS.get(cfg.name)


def register_task_source(name: str, available: Callable[[EnvConfig], bool] | None = None):
    """Register ``fn(env_cfg, split) -> list[Task]``: the real tasks of an environment's train/eval splits.
    ``available(env_cfg)``: whether this config has any (e.g. only with a tasks file); default always."""

    def deco(fn: Callable[[EnvConfig, str], list[Task]]):
        _TASKS[name] = fn
        if available is not None:
            _AVAILABLE[name] = available
        return fn

    return deco


def load_plugins(modules: Sequence[str]) -> None:
    """Import user modules that register environments (``env.plugins``): bring your own environment."""
    for mod in modules:
        try:
            importlib.import_module(mod)
        except ImportError as err:
            here = os.getcwd()
            if here in sys.path or not isinstance(err, ModuleNotFoundError):
                raise EnvError(f"cannot import environment plugin '{mod}' (env.plugins): {err}") from None
            sys.path.insert(0, here)  # a plugin module in the working folder, as `python -m` would find it
            try:
                importlib.import_module(mod)
            except ImportError as again:
                raise EnvError(f"cannot import environment plugin '{mod}' (env.plugins): {again}") from None


def has_task_source(cfg: EnvConfig) -> bool:
    """Whether the configured environment has real tasks of its own (an MCP server only with env.mcp.tasks_file)."""
    _load_builtins()
    load_plugins(cfg.plugins)
    return cfg.name in _TASKS and _AVAILABLE.get(cfg.name, lambda _: True)(cfg)


def env_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """The real tasks of a split for the configured environment."""
    _load_builtins()
    load_plugins(cfg.plugins)
    if cfg.name not in _REGISTRY and cfg.name not in _TASKS:
        raise EnvError(
            f"unknown environment '{cfg.name}' (env.name); available: {', '.join(sorted(_REGISTRY))}. A plugin "
            "environment is named in env.plugins (a module that registers it) or installed with an "
            f"'{ENTRY_POINT_GROUP}' entry point"
        )
    if cfg.name not in _TASKS:
        raise EnvError(
            f"environment '{cfg.name}' has no person-written tasks (it registers no task source); train on its "
            "own synthesized tasks (questioning.enabled: true, questioning.hybrid_lambda: 1), give a tasks file if "
            "it reads one (e.g. env.mcp.tasks_file), or register one with "
            "evolvekit.env.registry.register_task_source"
        )
    tasks = _TASKS[cfg.name](cfg, split)
    if not tasks:
        raise EnvError(f"environment '{cfg.name}' has no tasks in split '{split}' for this config")
    return tasks


def preflight(cfg: EnvConfig, task: Task | None = None) -> None:
    """Start one episode of the configured environment and close it, before any model loads (issue 54): an
    environment that cannot start (a server command not found, a seed folder missing, a service down) is one
    EnvError line now, instead of a run that records the error in every episode and exits 0 with a score of 0.
    ``task``: the first task the caller will run (an environment such as AgentEvolver's needs one to start)."""
    env = make_env(cfg)
    try:
        env.reset(task)
    except EnvError as err:
        raise EnvError(f"env {cfg.name}: cannot start an episode: {err}") from None
    except Exception as err:  # noqa: BLE001 - whatever the backend raised, said in one line
        while isinstance(err, BaseExceptionGroup) and err.exceptions:  # anyio task groups wrap the real cause
            err = err.exceptions[0]  # type: ignore[assignment]
        first = (str(err).splitlines() or [""])[0][:300]
        raise EnvError(f"env {cfg.name}: cannot start an episode: {type(err).__name__}: {first}") from None
    finally:
        env.close()


# The built-in environments register themselves like plugins do, imported by name on first use
BUILTINS = (
    "evolvekit.env.bfcl.env",
    "evolvekit.env.scienceworld",
    "evolvekit.env.agentevolver",
    "evolvekit.env.mcp",
    "evolvekit.env.openenv",
)
SERVICE_CLIENTS = ("agentevolver",)  # environments that are themselves clients of env.service_url


ENTRY_POINT_GROUP = "evolvekit.environments"  # installed packages register environments here (issue 54)
_entry_points_loaded = False


def _load_builtins() -> None:
    """The built-in environments, and (once) every installed package's ``evolvekit.environments`` entry points:
    an installed plugin environment needs no ``env.plugins`` line."""
    global _entry_points_loaded
    for mod in BUILTINS:
        importlib.import_module(mod)
    if not _entry_points_loaded:
        _entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()
            except Exception as err:  # noqa: BLE001 - a broken third-party plugin is named, not fatal to the rest
                log.warning("environment plugin %s (%s) failed to load: %s", ep.name, ep.value, err)


def available_envs() -> dict[str, str]:
    _load_builtins()
    return {name: desc for name, (_, desc) in sorted(_REGISTRY.items())}


def make_env(cfg: EnvConfig | str) -> Environment:
    """Build an environment from config; with ``env.service_url`` set, a client of the environment service."""
    _load_builtins()
    if isinstance(cfg, str):
        cfg = EnvConfig(name=cfg)
    load_plugins(cfg.plugins)
    env: Environment
    if cfg.service_url and cfg.name not in SERVICE_CLIENTS:
        from evolvekit.env.service.client import RemoteEnv

        env = RemoteEnv.from_config(cfg)
    elif cfg.name not in _REGISTRY:
        raise EnvError(f"unknown environment '{cfg.name}' (env.name); available: {', '.join(sorted(_REGISTRY))}")
    else:
        env = _REGISTRY[cfg.name][0](cfg)
    if cfg.worked_examples == "person":  # the switch: the environment's person-written examples are shown
        return env
    from evolvekit.env.examples import ShownExamples

    # at the source: a person's worked examples are task instances, shown only behind env.worked_examples: person
    return cast(Environment, ShownExamples(env, _no_examples))


def _no_examples() -> list:
    return []
