"""``evolvekit report``, ``evolvekit dashboard`` and ``evolvekit ablate``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import console, setup_logging


def report_command(
    run_dir: Path = typer.Argument(..., help="a run directory, or a folder of runs (an ablation)"),
    baseline: Optional[str] = typer.Option(
        None, help="for a run: a baseline run directory; for a folder: a row name (e.g. grpo_real)"
    ),
    out: Optional[Path] = typer.Option(None, help="output folder (default RUN_DIR/report)"),
) -> None:
    """Write an HTML report (and its PNGs) of a run, or of every run in a folder with per-row curves over seeds."""
    from evolvekit.errors import ConfigError
    from evolvekit.report.collection import find_runs, is_run_dir
    from evolvekit.report.html import write_collection_report, write_report

    if not is_run_dir(run_dir):
        if not find_runs(run_dir):
            raise ConfigError(f"{run_dir} is not a run directory (no run.sqlite) and holds no runs")
        sys.stdout.write(f"{write_collection_report(run_dir, out, baseline)}\n")
        return
    base = Path(baseline) if baseline else None
    if base is not None and not is_run_dir(base):
        raise ConfigError(f"{base} is not a run directory (no run.sqlite)")
    page = write_report(run_dir, out, base)
    sys.stdout.write(f"{page}\n")


def dashboard_command(
    run_dir: Path = typer.Argument(..., help="a run directory, or a folder of runs (an ablation)"),
    port: int = typer.Option(8770, help="port on 127.0.0.1"),
) -> None:
    """Serve a read-only page to browse a run or a folder of runs (live while they run), on 127.0.0.1 only."""
    import uvicorn

    from evolvekit.errors import ConfigError
    from evolvekit.report.collection import find_runs, is_run_dir
    from evolvekit.report.dashboard import create_collection_dashboard, create_dashboard

    if is_run_dir(run_dir):
        app = create_dashboard(run_dir)
    elif find_runs(run_dir):
        app = create_collection_dashboard(run_dir)
    else:
        raise ConfigError(f"{run_dir} is not a run directory (no run.sqlite) and holds no runs")
    console.print(f"dashboard on http://127.0.0.1:{port}/ (Ctrl-C to stop)")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def ablate_command(
    spec: Path = typer.Argument(..., help="ablation YAML, e.g. configs/evidence/ablation.yaml"),
    only: Optional[list[str]] = typer.Option(None, "--only", help="run only these rows"),
) -> None:
    """Run ablation rows over seeds (resumable) and write a markdown table of held-out avg@k / best@k."""
    from evolvekit.report.ablate import run_ablation

    setup_logging("INFO")
    path = run_ablation(spec, only)
    sys.stdout.write(path.read_text())
