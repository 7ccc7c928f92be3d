"""Progress of long work, seen on a terminal and off one (issue 54: a run whose output went to a file, CI or
``| tee`` printed nothing for minutes, because rich's bars are transient and drawn only on a terminal).

``StageProgress`` logs a start line, then at most one line every ``every_s`` seconds with the count, the elapsed
time and an estimate of the time left, then an end line, all through ``logging``; on a terminal it also draws
rich's bar."""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Callable

from rich.progress import Progress

log = logging.getLogger("evolvekit.progress")


def eta_seconds(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left if the rest goes at the pace so far; None before the first item is done."""
    if done <= 0 or total <= done:
        return None if done <= 0 else 0.0
    return elapsed / done * (total - done)


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class StageProgress:
    """``with StageProgress("rollouts", n) as p: ... p.advance()``: log lines off a terminal, a bar on one."""

    def __init__(
        self,
        what: str,
        total: int,
        show_bar: bool = True,
        every_s: float = 30.0,
        logger: logging.Logger = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.total, self.every_s, self.logger, self.clock = what, total, every_s, logger, clock
        self.done = 0
        self._bar = Progress(transient=True)
        self._bar.disable = not (show_bar and self._bar.console.is_terminal)  # off a terminal: the log lines only
        self._task = self._bar.add_task(what, total=total)
        self._t0 = self._last = 0.0

    @property
    def elapsed(self) -> float:
        return self.clock() - self._t0

    def __enter__(self) -> StageProgress:
        self._t0 = self._last = self.clock()
        if self.total:  # nothing to do: no lines
            self.logger.info("%s: %d to do", self.what, self.total)
        self._bar.start()
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._bar.advance(self._task, n)
        now = self.clock()
        if now - self._last >= self.every_s and self.done < self.total:
            self._last = now
            left = eta_seconds(self.done, self.total, now - self._t0)
            self.logger.info(
                "%s: %d/%d done, %s elapsed, about %s left",
                self.what,
                self.done,
                self.total,
                _clock_text(now - self._t0),
                _clock_text(left or 0.0),
            )

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.stop()
        if not self.total:
            return
        if kind is None:
            self.logger.info("%s: %d done in %.1fs", self.what, self.done, self.elapsed)
        else:
            self.logger.info("%s: stopped after %d of %d (%s)", self.what, self.done, self.total, kind.__name__)
