"""``evolvekit eval``: held-out evaluation of a policy (local checkpoint or served model)."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import ConfigOpt, JsonOpt, SetOpt, emit_json, setup_logging

log = logging.getLogger(__name__)


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
        return (
            "\n\n".join(f"When to use: {e.when_to_use}\nContent: {e.content}" for e, _ in hits),
            tuple(e.experience_id for e, _ in hits),
        )

    return lookup


def _evaluate(
    cfg, category: str, subset: str, k: int, limit: Optional[int], out: Path, experiences: Optional[Path] = None
):
    from evolvekit.agent.evaluate import EpisodeJournal, evaluate_policy, write_results
    from evolvekit.env.bfcl.data import load_tasks
    from evolvekit.env.registry import env_tasks, make_env, preflight
    from evolvekit.errors import EnvError
    from evolvekit.llm.factory import role_llm, sampling_for

    make_env(cfg.env).close()  # an environment that cannot be built is refused now (exit 2), not per rollout
    if cfg.env.family or cfg.env.name != "bfcl":
        tasks = env_tasks(cfg.env, subset)
    else:
        tasks = load_tasks(category, None if subset == "all" else subset, cfg.env.backends or None)
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise EnvError(f"no tasks in {category}/{subset} with backends {cfg.env.backends}")
    preflight(cfg.env, tasks[0])  # one episode starts before the model loads: exit 2 now, not a silent score of 0
    # what makes two evaluations the same: their tasks, k, and every setting but the run's name and folder
    settings = cfg.model_dump(mode="json", exclude={"run": {"name", "out_dir", "log_level"}})
    what = {"tasks": [t.task_id for t in tasks], "k": k, "experiences": str(experiences or ""), "config": settings}
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    journal = EpisodeJournal(out.with_name(out.stem + ".episodes.jsonl"), key)  # refuses another's before loading
    episodes = len(tasks) * k
    log.info(
        "evaluation: %d tasks x %d samples = %d episodes, each at most %d steps of at most %d generated tokens "
        "(at most %d generated tokens in all; rollout.max_steps, models.policy.max_new_tokens)",
        len(tasks), k, episodes, cfg.rollout.max_steps, cfg.models.policy.max_new_tokens,
        episodes * cfg.rollout.max_steps * cfg.models.policy.max_new_tokens,
    )  # fmt: skip
    llm = role_llm(cfg.models, "policy")
    params = sampling_for(cfg.models.policy, seed=cfg.run.seed)
    lookup = _experience_lookup(cfg, experiences) if experiences else None
    report, trajs = evaluate_policy(
        tasks,
        lambda: make_env(cfg.env),
        llm,
        cfg.rollout,
        params,
        k,
        cfg.env.tool_rendering,
        experience_for=lookup,
        journal=journal,
    )
    write_results(out, report, trajs)
    return report


def eval_command(
    env: Optional[str] = typer.Option(None, help="environment (default: the config's env.name, bfcl)"),
    split: str = typer.Option("multi_turn_base", help="BFCL category"),
    subset: Optional[str] = typer.Option(None, help="train/dev/test/all (default: env.eval_split)"),
    k: int = typer.Option(8, help="samples per task (avg@k, best@k)"),
    limit: Optional[int] = typer.Option(None, help="only the first N tasks"),
    policy: Optional[str] = typer.Option(None, help="policy checkpoint folder (default: models.policy.model)"),
    config: Optional[Path] = ConfigOpt,
    overrides: Optional[list[str]] = SetOpt,
    out: Optional[Path] = typer.Option(
        None,
        help="per-task results JSONL (default under runs/eval-...); each episode is written to "
        "<out>.episodes.jsonl as it finishes, and a re-run with the same --out continues from there",
    ),
    experiences: Optional[Path] = typer.Option(
        None, help="JSONL pool (evolvekit experiences export): inject the best match into every rollout"
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Evaluate the policy: avg@k and best@k with per-task results written to a file."""
    from evolvekit.config import load_config

    sets = (
        list(overrides or [])
        + ([f"env.name={env}"] if env else [])
        + ([f"models.policy.model={policy}"] if policy else [])
    )
    cfg = load_config(config, sets)
    setup_logging(cfg.run.log_level)
    out = out or Path(cfg.run.out_dir) / f"eval-{datetime.now():%Y%m%d-%H%M%S}" / "results.jsonl"
    t0 = time.perf_counter()
    report = _evaluate(cfg, split, subset or cfg.env.eval_split, k, limit, out, experiences)
    # what was evaluated: a family's tasks (its split), another environment's tasks, or a BFCL category
    what = (
        {"family": cfg.env.family, "split": subset or cfg.env.eval_split}
        if cfg.env.family
        else {"env": cfg.env.name, "split": subset or cfg.env.eval_split}
        if cfg.env.name != "bfcl"
        else {"category": split, "split": subset or cfg.env.eval_split}
    )
    summary = {**report.summary(), **what, "results": str(out), "seconds": round(time.perf_counter() - t0, 1)}
    if as_json:
        emit_json(summary)
    else:
        sys.stdout.write(" ".join(f"{k_}={v}" for k_, v in summary.items()) + "\n")
