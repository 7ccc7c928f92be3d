"""``evolvekit eval`` and ``evolvekit run``."""

from __future__ import annotations

import json
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import console, emit_json, setup_logging


def _experience_lookup(cfg, path: Path):
    """Test-time experience (e.g. Evolving-RL skills): top-k retrieval from an exported pool, injected as a span."""
    from evolvekit.errors import ConfigError
    from evolvekit.llm.factory import build_embedder
    from evolvekit.navigating.pool import ExperiencePool

    if not path.is_file():
        raise ConfigError(f"no such file: {path}")
    pool = ExperiencePool(build_embedder(cfg.embedding).embed, theta_sim=2.0)  # keep every imported entry
    pool.import_jsonl(path)

    def lookup(task):
        hits = pool.retrieve("\n".join(task.turns), cfg.navigating.inject_count)
        if not hits:
            return None, ()
        return ("\n\n".join(f"When to use: {e.when_to_use}\nContent: {e.content}" for e, _ in hits),
                tuple(e.experience_id for e, _ in hits))

    return lookup


def _evaluate(cfg, category: str, subset: str, k: int, limit: Optional[int], out: Path,
              experiences: Optional[Path] = None):
    from evolvekit.agent.evaluate import evaluate_policy, write_results
    from evolvekit.env.bfcl.data import load_tasks
    from evolvekit.env.registry import env_tasks, make_env
    from evolvekit.errors import EnvError
    from evolvekit.llm.factory import role_llm, sampling_for

    if cfg.env.family or cfg.env.name != "bfcl":
        tasks = env_tasks(cfg.env, subset)
    else:
        if cfg.env.name != "bfcl":
            raise EnvError("eval currently supports env 'bfcl'")
        tasks = load_tasks(category, None if subset == "all" else subset, cfg.env.backends or None)
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise EnvError(f"no tasks in {category}/{subset} with backends {cfg.env.backends}")
    llm = role_llm(cfg.models, "policy")
    params = sampling_for(cfg.models.policy, seed=cfg.run.seed)
    lookup = _experience_lookup(cfg, experiences) if experiences else None
    report, trajs = evaluate_policy(tasks, lambda: make_env(cfg.env), llm, cfg.rollout, params, k, cfg.env.tool_rendering,
                                    experience_for=lookup)
    write_results(out, report, trajs)
    return report


def eval_command(env: str = typer.Option("bfcl", help="environment"),
                 split: str = typer.Option("multi_turn_base", help="BFCL category"),
                 subset: Optional[str] = typer.Option(None, help="train/dev/test/all (default: env.eval_split)"),
                 k: int = typer.Option(8, help="samples per task (avg@k, best@k)"),
                 limit: Optional[int] = typer.Option(None, help="only the first N tasks"),
                 policy: Optional[str] = typer.Option(None, help="policy checkpoint folder (default: models.policy.model)"),
                 config: Optional[Path] = typer.Option(None, "--config", "-c"),
                 overrides: Optional[list[str]] = typer.Option(None, "--set"),
                 out: Optional[Path] = typer.Option(None, help="per-task results JSONL (default under runs/eval-...)"),
                 experiences: Optional[Path] = typer.Option(None, help="JSONL pool (evolvekit experiences export): "
                                                            "inject the best match into every rollout"),
                 as_json: bool = typer.Option(False, "--json")) -> None:
    """Evaluate the policy: avg@k and best@k with per-task results written to a file."""
    from evolvekit.config import load_config

    sets = list(overrides or []) + [f"env.name={env}"] + ([f"models.policy.model={policy}"] if policy else [])
    cfg = load_config(config, sets)
    setup_logging(cfg.run.log_level)
    out = out or Path(cfg.run.out_dir) / f"eval-{datetime.now():%Y%m%d-%H%M%S}" / "results.jsonl"
    t0 = time.perf_counter()
    report = _evaluate(cfg, split, subset or cfg.env.eval_split, k, limit, out, experiences)
    summary = {**report.summary(), "split": split, "results": str(out), "seconds": round(time.perf_counter() - t0, 1)}
    if as_json:
        emit_json(summary)
    else:
        sys.stdout.write(" ".join(f"{k_}={v}" for k_, v in summary.items()) + "\n")


def run_command(config: Optional[Path] = typer.Argument(None, help="YAML config, e.g. configs/quickstart.yaml"),
                overrides: Optional[list[str]] = typer.Option(None, "--set", help="override a config key: a.b=value"),
                resume: Optional[Path] = typer.Option(None, "--resume", help="continue this run directory"),
                no_progress: bool = typer.Option(False, "--no-progress", help="no progress bars"),
                as_json: bool = typer.Option(False, "--json")) -> None:
    """Run the master loop: tasks → rollouts → experience → update, with held-out evaluation before and after."""
    from evolvekit.config import load_config
    from evolvekit.errors import EvolveKitError
    from evolvekit.orchestrator.build import build_loop, open_run

    cfg = load_config(config, overrides) if config is not None else None
    if resume is not None and overrides:
        raise typer.BadParameter("--set cannot change a resumed run (its stored config is used)")
    cfg, run_dir, store = open_run(cfg, resume)
    setup_logging(cfg.run.log_level)
    console.print(f"run directory: {run_dir}")
    try:
        try:
            loop = build_loop(cfg, run_dir, store, console, show_progress=not no_progress)
        except EvolveKitError:
            if resume is None:  # refused before anything ran: leave no run folder behind
                store.close()
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        summary = loop.run()
    finally:
        store.close()
    console.print(f"metrics: {summary['metrics']}\nlearning curve: {summary['learning_curve']}\n"
                  f"tensorboard: tensorboard --logdir {summary['tensorboard']}\nrun store: {summary['store']}\n"
                  f"policy checkpoint: {summary['checkpoint']} (evolvekit eval --policy PATH)")
    if as_json:
        emit_json(summary)
    else:
        before, after = summary.get("eval_before") or {}, summary.get("eval_after") or {}
        keys = [k for k in before if "@" in k] or [k for k in after if "@" in k]
        sys.stdout.write(" ".join([f"run_dir={run_dir}"] + [f"{k}: {before.get(k)} -> {after.get(k)}" for k in keys]) + "\n")
