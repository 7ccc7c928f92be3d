"""Logging set-up and the stderr console, shared by the command line and by processes it spawns (an ablation's
runs): whole plain lines off a terminal, rich ones on it."""

from __future__ import annotations

import logging
import os
import sys

from rich.console import Console
from rich.logging import RichHandler

console = Console(stderr=True)
if not console.is_terminal:  # to a file, CI or `| tee`: whole lines, never wrapped at 80 columns (issue 54)
    console.soft_wrap = True

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # off a terminal: one plain line per record


def setup_logging(level: str = "INFO") -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    handler: logging.Handler
    if console.is_terminal:
        handler = RichHandler(console=console, show_path=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, "%Y-%m-%d %H:%M:%S"))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler], force=True)
    for noisy in ("httpx", "sentence_transformers", "urllib3", "py4j"):  # py4j: ScienceWorld's JVM shutdown
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
