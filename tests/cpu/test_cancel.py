"""env/cancel.py: checkpoints and the stops that run at a request's deadline (issue 52: work cancelled, not
orphaned)."""

from __future__ import annotations

import threading
import time

import pytest

from evolvekit.env import cancel


def test_checkpoint_raises_only_past_the_deadline_and_nothing_outside_one():
    cancel.checkpoint()  # no deadline: nothing
    assert not cancel.expired()
    with cancel.deadline(time.monotonic() + 60):
        cancel.checkpoint()
        assert not cancel.expired()
    with cancel.deadline(time.monotonic() - 1), pytest.raises(cancel.Cancelled):
        assert cancel.expired()
        cancel.checkpoint()


def test_a_stop_runs_at_the_deadline_from_a_timer():
    ran = threading.Event()
    with cancel.deadline(time.monotonic() + 0.2):
        cancel.on_expiry(ran.set)
        assert not ran.is_set()  # not before the deadline
        assert ran.wait(5)  # the block is still running: the stop comes from the timer


def test_a_stop_does_not_run_when_its_block_ends_in_time():
    ran = threading.Event()
    with cancel.deadline(time.monotonic() + 0.2):
        cancel.on_expiry(ran.set)
    assert not ran.wait(0.5)


def test_a_stop_registered_past_the_deadline_runs_at_once_and_outside_a_deadline_never():
    ran: list[str] = []
    cancel.on_expiry(lambda: ran.append("outside"))
    with cancel.deadline(time.monotonic() - 1):
        cancel.on_expiry(lambda: ran.append("late"))
        assert ran == ["late"]
    time.sleep(0.05)
    assert ran == ["late"]


def test_each_stop_runs_once_and_each_block_has_its_own():
    runs: list[str] = []
    with cancel.deadline(time.monotonic() + 0.1):
        cancel.on_expiry(lambda: runs.append("a"))
        cancel.on_expiry(lambda: runs.append("b"))
        with cancel.deadline(time.monotonic() + 60):
            cancel.on_expiry(lambda: runs.append("inner"))  # its own block, which ends in time
        time.sleep(0.4)
    time.sleep(0.1)
    assert runs == ["a", "b"]
