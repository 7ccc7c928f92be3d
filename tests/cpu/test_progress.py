"""Issue 54 (3): long work is seen off a terminal. StageProgress logs start, progress with an estimate of the time
left, and end; the CLI's log lines are whole lines off a terminal."""

import logging
import subprocess
import sys

from evolvekit.progress import StageProgress, eta_seconds


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_eta_is_the_pace_so_far_times_what_is_left():
    assert eta_seconds(0, 10, 5.0) is None
    assert eta_seconds(2, 10, 30.0) == 120.0  # 15 s each, 8 left
    assert eta_seconds(10, 10, 30.0) == 0.0


def test_stage_progress_logs_start_progress_with_eta_and_end(caplog):
    clock = _Clock()
    logger = logging.getLogger("evolvekit.test_progress")
    with caplog.at_level(logging.INFO, logger=logger.name):
        with StageProgress("step attribution", 4, show_bar=False, every_s=30, logger=logger, clock=clock) as p:
            clock.now += 10
            p.advance()  # 10 s in: no line yet
            clock.now += 30
            p.advance()  # 40 s in, 2 of 4: 20 s each, 2 left
            clock.now += 5
            p.advance()  # 5 s after the last line: none
            p.advance()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "step attribution: 4 to do",
        "step attribution: 2/4 done, 40s elapsed, about 40s left",
        "step attribution: 4 done in 45.0s",
    ]


def test_nothing_to_do_logs_nothing_and_a_failure_says_where_it_stopped(caplog):
    logger = logging.getLogger("evolvekit.test_progress")
    with caplog.at_level(logging.INFO, logger=logger.name):
        with StageProgress("experience writing", 0, show_bar=False, logger=logger):
            pass
        assert caplog.records == []
        try:
            with StageProgress("rollouts", 3, show_bar=False, logger=logger) as p:
                p.advance()
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            pass
    assert caplog.records[-1].getMessage() == "rollouts: stopped after 1 of 3 (KeyboardInterrupt)"


def test_cli_log_lines_off_a_terminal_are_whole_plain_lines():
    code = (
        "import logging; from evolvekit.cli.common import setup_logging, console; setup_logging();"
        "logging.getLogger('evolvekit.x').info('word ' * 40); console.print('iteration ' + 'y' * 150)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = res.stderr.splitlines()
    logged = [ln for ln in lines if "word" in ln]
    assert len(logged) == 1 and logged[0].endswith("INFO evolvekit.x: " + "word " * 40)
    assert [ln for ln in lines if "iteration" in ln] == ["iteration " + "y" * 150]
