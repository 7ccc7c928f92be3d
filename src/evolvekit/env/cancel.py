"""Cooperative cancellation of environment work whose request has passed its deadline.

A thread cannot be killed, so the environment service (env/service/server.py) runs each call under ``deadline``
and environments call ``checkpoint()`` between the units of their work (each tool call of a step, each turn of a
reset's replay, each backend of a state walk). Past the deadline the next checkpoint raises ``Cancelled``: the
worker stops within one unit of work instead of running on, orphaned, after its client got a 504. Outside a
deadline (in-process rollouts) ``checkpoint`` does nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from evolvekit.errors import EnvError

_DEADLINE: ContextVar[float | None] = ContextVar("evolvekit_env_deadline", default=None)


class Cancelled(EnvError):
    """Environment work stopped at a checkpoint because its request's deadline had passed."""


@contextmanager
def deadline(at: float) -> Iterator[None]:
    """Run the block with ``at`` (a ``time.monotonic()`` instant) as the deadline of its environment work."""
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def checkpoint() -> None:
    """Raise ``Cancelled`` when the current work's deadline has passed; nothing otherwise."""
    at = _DEADLINE.get()
    if at is not None and time.monotonic() > at:
        raise Cancelled("the request's deadline passed; its environment work was cancelled")
