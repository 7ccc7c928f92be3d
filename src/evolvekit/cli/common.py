"""Shared CLI helpers: the options every command shares, one-line errors, and the ``--json`` last-line convention
(logging set-up and the console: evolvekit/logs.py)."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from evolvekit.logs import LOG_FORMAT, console, setup_logging

__all__ = ["LOG_FORMAT", "ConfigOpt", "JsonOpt", "SetOpt", "console", "emit_json", "setup_logging"]

# the options every command shares, with one help text each
JsonOpt = typer.Option(False, "--json", help="print one JSON object as the last line of stdout")
ConfigOpt = typer.Option(None, "--config", "-c", help="YAML config (default: the embedded defaults)")
SetOpt = typer.Option(None, "--set", help="override a config value: section.key=value (repeatable)")


def emit_json(obj: Any) -> None:
    """Print one JSON object as the last line of stdout."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()
