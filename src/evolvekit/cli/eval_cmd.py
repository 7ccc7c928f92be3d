"""``evolvekit eval`` and the current ``evolvekit run``."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import console, emit_json, setup_logging


def _evaluate(cfg, category: str, subset: str, k: int, limit: Optional[int], out: Path):
    from evolvekit.agent.evaluate import evaluate_policy, write_results
    from evolvekit.env.bfcl.data import load_tasks
    from evolvekit.env.registry import make_env
    from evolvekit.errors import EnvError
    from evolvekit.llm.factory import role_llm, sampling_for

    if cfg.env.name != "bfcl":
        raise EnvError("eval currently supports env 'bfcl'")
    tasks = load_tasks(category, None if subset == "all" else subset, cfg.env.backends or None)
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise EnvError(f"no tasks in {category}/{subset} with backends {cfg.env.backends}")
    llm = role_llm(cfg.models, "policy")
    params = sampling_for(cfg.models.policy, seed=cfg.run.seed)
    report, trajs = evaluate_policy(tasks, lambda: make_env(cfg.env), llm, cfg.rollout, params, k, cfg.env.tool_rendering)
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
                 as_json: bool = typer.Option(False, "--json")) -> None:
    """Evaluate the policy: avg@k and best@k with per-task results written to a file."""
    from evolvekit.config import load_config

    sets = list(overrides or []) + [f"env.name={env}"] + ([f"models.policy.model={policy}"] if policy else [])
    cfg = load_config(config, sets)
    setup_logging(cfg.run.log_level)
    out = out or Path(cfg.run.out_dir) / f"eval-{datetime.now():%Y%m%d-%H%M%S}" / "results.jsonl"
    t0 = time.perf_counter()
    report = _evaluate(cfg, split, subset or cfg.env.eval_split, k, limit, out)
    summary = {**report.summary(), "split": split, "results": str(out), "seconds": round(time.perf_counter() - t0, 1)}
    if as_json:
        emit_json(summary)
    else:
        sys.stdout.write(" ".join(f"{k_}={v}" for k_, v in summary.items()) + "\n")


def run_command(config: Path = typer.Argument(..., help="YAML config, e.g. configs/quickstart.yaml"),
                overrides: Optional[list[str]] = typer.Option(None, "--set"),
                as_json: bool = typer.Option(False, "--json")) -> None:
    """Run the main job. Today: a held-out evaluation of the policy (the training stages are not built yet)."""
    from evolvekit.config import load_config

    cfg = load_config(config, overrides)
    setup_logging(cfg.run.log_level)
    run_dir = Path(cfg.run.out_dir) / f"{cfg.run.name}-{datetime.now():%Y%m%d-%H%M%S}"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    console.print("[yellow]note:[/yellow] the training loop (task supply → rollouts → experience → update) is not "
                  "implemented yet; this run evaluates the policy on held-out tasks only.")
    category = cfg.env.categories[0]
    report = _evaluate(cfg, category, cfg.env.eval_split, cfg.rollout.group_size, cfg.train.tasks_per_iteration,
                       run_dir / "eval_before.jsonl")
    summary = {**report.summary(), "run_dir": str(run_dir), "split": f"{category}/{cfg.env.eval_split}"}
    (run_dir / "metrics.json").write_text(json.dumps(summary, indent=2))
    console.print(f"results in {run_dir}/ (metrics.json, eval_before.jsonl, eval_before.trajectories.jsonl)")
    if as_json:
        emit_json(summary)
    else:
        sys.stdout.write(" ".join(f"{k_}={v}" for k_, v in summary.items()) + "\n")
