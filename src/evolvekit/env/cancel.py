"""Cooperative cancellation of environment work whose request has passed its deadline.

A thread cannot be killed, so the environment service (env/service/server.py) runs each call under ``deadline``
and environments call ``checkpoint()`` between the units of their work (each tool call of a step, each turn of a
reset's replay, each backend of a state walk). Past the deadline the next checkpoint raises ``Cancelled``: the
worker stops within one unit of work instead of running on, orphaned, after its client got a 504. Outside a
deadline (in-process rollouts) ``checkpoint`` does nothing.

Work that blocks inside something it cannot interrupt (a JVM starting, a call into it) registers a way to stop it
with ``on_expiry`` (for example killing its process): it runs at the deadline, from a timer thread, unless the block
ended before; registered after the deadline, it runs at once. Outside a deadline ``on_expiry`` does nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from evolvekit.errors import EnvError

_DEADLINE: ContextVar[float | None] = ContextVar("evolvekit_env_deadline", default=None)
_EXPIRY: ContextVar[_Expiry | None] = ContextVar("evolvekit_env_expiry", default=None)


class Cancelled(EnvError):
    """Environment work stopped at a checkpoint because its request's deadline had passed."""


class _Expiry:
    """The stops registered in one deadline's block, run once by a timer at the deadline unless the block ended."""

    def __init__(self, at: float) -> None:
        self.at = at
        self.stops: list[Callable[[], None]] = []
        self.lock = threading.Lock()
        self.fired = self.ended = False
        self.timer: threading.Timer | None = None

    def add(self, stop: Callable[[], None]) -> None:
        with self.lock:
            if self.ended:
                return
            if not self.fired and time.monotonic() <= self.at:
                self.stops.append(stop)
                if self.timer is None:
                    self.timer = threading.Timer(max(0.0, self.at - time.monotonic()), self.fire)
                    self.timer.daemon = True
                    self.timer.start()
                return
        stop()  # the deadline has passed already

    def fire(self) -> None:
        with self.lock:
            if self.ended or self.fired:
                return
            self.fired = True
            stops, self.stops = self.stops, []
        for stop in stops:
            stop()

    def end(self) -> None:
        with self.lock:
            self.ended = True
            if self.timer is not None:
                self.timer.cancel()


@contextmanager
def deadline(at: float) -> Iterator[None]:
    """Run the block with ``at`` (a ``time.monotonic()`` instant) as the deadline of its environment work."""
    expiry = _Expiry(at)
    token, expiry_token = _DEADLINE.set(at), _EXPIRY.set(expiry)
    try:
        yield
    finally:
        expiry.end()
        _EXPIRY.reset(expiry_token)
        _DEADLINE.reset(token)


def on_expiry(stop: Callable[[], None]) -> None:
    """Run ``stop`` at the current block's deadline unless the block ends first; at once when it has passed already.
    Nothing happens outside a deadline."""
    expiry = _EXPIRY.get()
    if expiry is not None:
        expiry.add(stop)


def expired() -> bool:
    """Has the current block's deadline passed? (False outside a deadline.)"""
    at = _DEADLINE.get()
    return at is not None and time.monotonic() > at


def checkpoint() -> None:
    """Raise ``Cancelled`` when the current work's deadline has passed; nothing otherwise."""
    at = _DEADLINE.get()
    if at is not None and time.monotonic() > at:
        raise Cancelled("the request's deadline passed; its environment work was cancelled")
