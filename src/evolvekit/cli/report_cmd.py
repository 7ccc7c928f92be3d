"""``evolvekit report``, ``evolvekit dashboard`` and ``evolvekit ablate``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import console, setup_logging


def report_command(run_dir: Path = typer.Argument(..., help="run directory"),
                   baseline: Optional[Path] = typer.Option(None, help="a baseline run for Steps@0.9 and AUC"),
                   out: Optional[Path] = typer.Option(None, help="output folder (default RUN_DIR/report)")) -> None:
    """Write an HTML report (and its PNGs) of a run."""
    from evolvekit.errors import ConfigError
    from evolvekit.report.html import write_report

    for d in [run_dir] + ([baseline] if baseline else []):
        if not (d / "run.sqlite").is_file():
            raise ConfigError(f"{d} is not a run directory (no run.sqlite)")
    page = write_report(run_dir, out, baseline)
    sys.stdout.write(f"{page}\n")


def dashboard_command(run_dir: Path = typer.Argument(..., help="run directory"),
                      port: int = typer.Option(8770, help="port on 127.0.0.1")) -> None:
    """Serve a read-only page to browse a run (live while it runs), on 127.0.0.1 only."""
    import uvicorn

    from evolvekit.errors import ConfigError
    from evolvekit.report.dashboard import create_dashboard

    if not (run_dir / "run.sqlite").is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no run.sqlite)")
    console.print(f"dashboard on http://127.0.0.1:{port}/ (Ctrl-C to stop)")
    uvicorn.run(create_dashboard(run_dir), host="127.0.0.1", port=port, log_level="warning")


def ablate_command(spec: Path = typer.Argument(..., help="ablation YAML, e.g. configs/ablation.yaml"),
                   only: Optional[list[str]] = typer.Option(None, "--only", help="run only these rows")) -> None:
    """Run ablation rows over seeds (resumable) and write a markdown table of held-out avg@k / best@k."""
    from evolvekit.report.ablate import run_ablation

    setup_logging("INFO")
    path = run_ablation(spec, only)
    sys.stdout.write(path.read_text())
