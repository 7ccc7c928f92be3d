"""``evolvekit run``: the master loop on a config (the README's first command)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import PERSON_EXAMPLES_LABEL, JsonOpt, SetOpt, console, emit_json, setup_logging


def run_command(
    config: Optional[Path] = typer.Argument(None, help="YAML config, e.g. configs/quickstart.yaml"),
    overrides: Optional[list[str]] = SetOpt,
    resume: Optional[Path] = typer.Option(
        None,
        "--resume",
        help="continue this run directory with its stored config; a CONFIG or --set given too may only raise "
        "train.iterations (extend the run) or change run.log_level, train.report_to or run.paths_from",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bars"),
    as_json: bool = JsonOpt,
) -> None:
    """Run the master loop: tasks → rollouts → experience → update, with held-out evaluation before and after."""
    from evolvekit.config import load_config
    from evolvekit.errors import EvolveKitError
    from evolvekit.orchestrator.build import build_loop, serve_updates
    from evolvekit.orchestrator.run_dir import open_run
    from evolvekit.train.distributed import DataParallel

    cfg = load_config(config, overrides) if config is not None else None
    parallel = DataParallel.from_environment()  # under torchrun / accelerate launch: data-parallel updates
    if parallel is not None and not parallel.is_main:  # rank 0 runs the loop; the others take part in updates
        run_dir = Path(parallel.broadcast(None))
        cfg, _, store = open_run(None, run_dir, lock=False)  # rank 0 holds the run folder's lock for the run
        setup_logging(cfg.run.log_level)
        try:
            updates = serve_updates(cfg, store, parallel)
        finally:
            store.close()
        sys.stderr.write(f"rank {parallel.rank}: took part in {updates} updates\n")
        return
    cfg, run_dir, store = open_run(cfg, resume, overrides=overrides if config is None else None)
    setup_logging(cfg.run.log_level)
    console.print(f"run directory: {run_dir}")
    if parallel is not None:
        parallel.broadcast(str(run_dir))
    try:
        try:
            loop = build_loop(cfg, run_dir, store, console, show_progress=not no_progress, parallel=parallel)
        except EvolveKitError:
            if resume is None:  # refused before anything ran: leave no run folder behind
                store.close()
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        summary = loop.run()
    finally:
        store.close()
        if parallel is not None:
            parallel.broadcast(None)  # the end: the other ranks' serve_updates() return
    console.print(
        f"metrics: {summary['metrics']}\nlearning curve: {summary['learning_curve']}\n"
        f"tensorboard: tensorboard --logdir {summary['tensorboard']}\nrun store: {summary['store']}\n"
        f"policy checkpoint: {summary['checkpoint']} (evolvekit eval --policy PATH)"
    )
    if as_json:
        emit_json(summary)
    else:
        before, after = summary.get("eval_before") or {}, summary.get("eval_after") or {}
        keys = [k for k in before if "@" in k] or [k for k in after if "@" in k]
        classes = [k for k in keys if "class/" in k]
        keys = [k for k in keys if k not in classes]
        sys.stdout.write(
            " ".join(
                [f"run_dir={run_dir}"]
                + (["ORACLE (run.oracle: person-written gold reached training)"] if cfg.run.oracle else [])
                + ([PERSON_EXAMPLES_LABEL] if cfg.env.worked_examples == "person" else [])
                + [f"{k}: {before.get(k)} -> {after.get(k)}" for k in keys]
            )
            + "\n"
        )
        from evolvekit.report.figures import heldout_lines

        for line in heldout_lines(before, after, classes):
            sys.stdout.write(line + "\n")
        if cfg.train.compare_with:
            from evolvekit.provenance import code_commit
            from evolvekit.report.evidence import comparison_line

            sys.stdout.write(comparison_line(cfg.train.compare_with, cfg, after, code_commit()) + "\n")
