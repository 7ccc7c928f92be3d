"""``evolvekit env``: list, check (ground-truth replay with the official checker), serve."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.progress import Progress

from evolvekit.cli.common import ConfigOpt, JsonOpt, SetOpt, console, emit_json, setup_logging
from evolvekit.errors import ConfigError

env_app = typer.Typer(help="Environments: list, self-check, serve over HTTP.", no_args_is_help=True)


@env_app.command("list")
def env_list(
    config: Optional[Path] = ConfigOpt, overrides: Optional[list[str]] = SetOpt, as_json: bool = JsonOpt
) -> None:
    """List the environments: built-in, installed plugins (entry points), and the config's env.plugins."""
    from evolvekit.config import load_config
    from evolvekit.env.registry import available_envs, load_plugins

    if config is not None or overrides:
        load_plugins(load_config(config, overrides).env.plugins)
    envs = available_envs()
    if as_json:
        emit_json(envs)
    else:
        for name, desc in envs.items():
            sys.stdout.write(f"{name:14s} {desc}\n")


@env_app.command("check")
def env_check(
    env: Optional[str] = typer.Option(None, help="environment name (default: the config's, else bfcl)"),
    split: str = typer.Option("multi_turn_base", help="BFCL category (multi_turn_base, _miss_func, ...)"),
    subset: str = typer.Option("all", help="all, or train/dev/test (other environments: default env.eval_split)"),
    limit: Optional[int] = typer.Option(None, help="check only the first N tasks"),
    config: Optional[Path] = ConfigOpt,
    overrides: Optional[list[str]] = SetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay every task's reference solution through the environment and score it with the environment's own
    evaluation (BFCL: the official checker). Tasks without a reference solution are only reset, to check that the
    environment answers."""
    from evolvekit.config import load_config
    from evolvekit.env.registry import env_tasks, make_env
    from evolvekit.env.replay import replay

    setup_logging("WARNING")
    cfg = load_config(config, overrides)
    name = env or (cfg.env.name if config or overrides else "bfcl")
    env_cfg = cfg.env.model_copy(update={"name": name})
    if name == "bfcl" and not (config or overrides):
        from evolvekit.env.bfcl.data import load_tasks

        tasks = load_tasks(split, None if subset == "all" else subset)[:limit]
        label = split
    else:
        label = cfg.env.eval_split if subset == "all" else subset
        tasks = env_tasks(env_cfg, label)[:limit]
    failures, unreferenced = [], 0
    t0 = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task(f"replaying {name} {label}", total=len(tasks))
        for task in tasks:
            environment = make_env(env_cfg)
            if task.reference_solution:
                result = replay(environment, task)
                if not result.passed:
                    failures.append({"task_id": task.task_id, **result.details})
            else:
                unreferenced += 1
                try:
                    environment.reset(task)
                finally:
                    environment.close()
            progress.advance(bar)
    checked = len(tasks) - unreferenced
    passed = checked - len(failures)
    elapsed = time.perf_counter() - t0
    if as_json:
        emit_json(
            {
                "env": name,
                "split": label,
                "passed": passed,
                "total": checked,
                "without_reference": unreferenced,
                "failures": failures,
                "seconds": round(elapsed, 2),
            }
        )
    else:
        for f in failures:
            sys.stdout.write(f"FAIL {f['task_id']}: {f.get('error_type')} {f.get('error_message')}\n")
        extra = f"; {unreferenced} tasks without a reference were reset only" if unreferenced else ""
        sys.stdout.write(f"{label}: {passed}/{checked} ground-truth replays pass{extra} ({elapsed:.1f}s)\n")
    if failures:
        raise typer.Exit(1)


@env_app.command("serve")
def env_serve(
    env: list[str] = typer.Option(
        ["bfcl"], help="an environment to serve (repeat for several; the first is the default); no other is created"
    ),
    host: str = typer.Option("127.0.0.1", help="bind address (loopback by default)"),
    port: int = typer.Option(8765, help="TCP port"),
    token_env: str = typer.Option("EVOLVEKIT_ENV_TOKEN", help="env var holding the bearer token (unset = no auth)"),
    step_timeout_s: float = typer.Option(10.0, help="seconds one reset or step may take before it is answered 504"),
    idle_ttl_s: float = typer.Option(600.0, help="seconds an unused instance lives before it is closed"),
) -> None:
    """Serve environment instances over HTTP (Gym-like API)."""
    from evolvekit.env.service.server import ServiceSettings, host_name, serve

    setup_logging("INFO")
    token = os.environ.get(token_env) or None
    loopback = host_name(host) in ServiceSettings.allowed_hosts
    if not loopback and token is None:
        raise ConfigError(f"--host {host}: serving beyond loopback needs a bearer token (set {token_env})")
    allowed = ServiceSettings.allowed_hosts + (() if loopback else (host_name(host),))
    from evolvekit.env.registry import available_envs

    unknown = [e for e in env if e not in available_envs()]
    if unknown:
        raise ConfigError(f"--env {unknown[0]}: unknown environment (evolvekit env list)")
    console.print(f"environment service on http://{host}:{port} (auth: {'bearer token' if token else 'none'})")
    serve(
        host,
        port,
        ServiceSettings(
            token=token,
            step_timeout_s=step_timeout_s,
            idle_ttl_s=idle_ttl_s,
            default_env=env[0],
            allowed_hosts=allowed,
            envs=tuple(env),
        ),
    )
