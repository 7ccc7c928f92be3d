"""``evolvekit env``: list, check (ground-truth replay with the official checker), serve."""

from __future__ import annotations

import os
import sys
import time
from typing import Optional

import typer
from rich.progress import Progress

from evolvekit.cli.common import console, emit_json, setup_logging

env_app = typer.Typer(help="Environments: list, self-check, serve over HTTP.", no_args_is_help=True)


@env_app.command("list")
def env_list(as_json: bool = typer.Option(False, "--json")) -> None:
    """List registered environments."""
    from evolvekit.env.registry import available_envs

    envs = available_envs()
    if as_json:
        emit_json(envs)
    else:
        for name, desc in envs.items():
            sys.stdout.write(f"{name:14s} {desc}\n")


@env_app.command("check")
def env_check(
    env: str = typer.Option("bfcl", help="environment name"),
    split: str = typer.Option("multi_turn_base", help="BFCL category (multi_turn_base, _miss_func, ...)"),
    subset: str = typer.Option("all", help="all, or train/dev/test of the fixed base-task partition"),
    limit: Optional[int] = typer.Option(None, help="check only the first N tasks"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Replay every task's ground-truth calls through our environment and score them with the official checker."""
    from evolvekit.env.bfcl.data import load_tasks
    from evolvekit.env.registry import make_env
    from evolvekit.env.replay import replay
    from evolvekit.errors import EnvError

    setup_logging("WARNING")
    if env != "bfcl":
        raise EnvError(f"env check supports bfcl only (got '{env}')")
    tasks = load_tasks(split, None if subset == "all" else subset)[:limit]
    environment = make_env(env)
    failures = []
    t0 = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task(f"replaying {split}", total=len(tasks))
        for task in tasks:
            result = replay(environment, task)
            if not result.passed:
                failures.append({"task_id": task.task_id, **result.details})
            progress.advance(bar)
    passed = len(tasks) - len(failures)
    elapsed = time.perf_counter() - t0
    if as_json:
        emit_json(
            {
                "env": env,
                "split": split,
                "passed": passed,
                "total": len(tasks),
                "failures": failures,
                "seconds": round(elapsed, 2),
            }
        )
    else:
        for f in failures:
            sys.stdout.write(f"FAIL {f['task_id']}: {f.get('error_type')} {f.get('error_message')}\n")
        sys.stdout.write(f"{split}: {passed}/{len(tasks)} ground-truth replays pass ({elapsed:.1f}s)\n")
    if failures:
        raise typer.Exit(1)


@env_app.command("serve")
def env_serve(
    env: str = typer.Option("bfcl", help="default environment"),
    host: str = typer.Option("127.0.0.1", help="bind address (loopback by default)"),
    port: int = typer.Option(8765),
    token_env: str = typer.Option("EVOLVEKIT_ENV_TOKEN", help="env var holding the bearer token (unset = no auth)"),
    step_timeout_s: float = typer.Option(10.0),
    idle_ttl_s: float = typer.Option(600.0),
) -> None:
    """Serve environment instances over HTTP (Gym-like API)."""
    from evolvekit.env.service.server import ServiceSettings, serve

    setup_logging("INFO")
    token = os.environ.get(token_env) or None
    console.print(f"environment service on http://{host}:{port} (auth: {'bearer token' if token else 'none'})")
    serve(
        host, port, ServiceSettings(token=token, step_timeout_s=step_timeout_s, idle_ttl_s=idle_ttl_s, default_env=env)
    )
