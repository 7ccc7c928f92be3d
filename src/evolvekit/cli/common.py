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


PERSON_EXAMPLES_LABEL = "PERSON-WRITTEN EXAMPLES (env.worked_examples: person)"


def examples_provenance(worked_examples: str) -> dict[str, str]:
    """What every output of a run or an evaluation says of its prompts' worked examples: where they came from, and
    the label of a person's (the information boundary: person-written material only behind the switch, and said)."""
    return {"worked_examples": worked_examples} | (
        {"label": PERSON_EXAMPLES_LABEL} if worked_examples == "person" else {}
    )


def emit_json(obj: Any) -> None:
    """Print one JSON object as the last line of stdout."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


# every character str.splitlines() breaks a line at, written as its escape in a one-line error
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_ESCAPED_BREAKS = {ord(c): c.encode("unicode_escape").decode("ascii") for c in _BREAKS}


def one_line(text: str) -> str:
    """``text`` as one line: a line break inside it (an id from an outside file, say) is written as its escape."""
    return text.translate(_ESCAPED_BREAKS)
