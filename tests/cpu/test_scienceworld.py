"""ScienceWorld end to end (the extra and Java are installed by scripts/setup.sh; skipped where they are not):
its own train/dev/test split as a task source, text actions, close() freeing the JVM, and `eval` and a short
`run` from the command line."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from evolvekit.env.scienceworld import scienceworld_available

pytestmark = pytest.mark.skipif(scienceworld_available() is not None, reason=str(scienceworld_available()))


def _live_java(proc: psutil.Process) -> bool:
    """A running JVM; one that exits between the listing and this look (what a killed JVM does) is not."""
    try:
        return proc.name() == "java" and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _java_children(expect: int | None = None) -> int:
    """Live JVMs started by this process (waiting up to 5 s for the expected count: a JVM exits asynchronously)."""
    deadline = time.monotonic() + 5
    while True:
        n = sum(_live_java(p) for p in psutil.Process(os.getpid()).children(recursive=True))
        if expect is None or n == expect or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


@pytest.mark.slow
def test_splits_are_the_simulators_own_and_disjoint():
    from evolvekit.config import EnvConfig
    from evolvekit.env.registry import env_tasks

    cfg = EnvConfig(name="scienceworld", family_tasks=400)
    train, test = env_tasks(cfg, "train"), env_tasks(cfg, "test")
    assert not {t.task_id for t in train} & {t.task_id for t in test}
    assert len({t.metadata["task_name"] for t in test[:30]}) == 30  # the first tasks cover every task type
    assert test[0].task_id == "scienceworld-boil-21" and test[0].metadata == {
        "task_name": "boil",
        "variation": 21,
        "split": "test",
    }
    assert _java_children(expect=0) == 0  # the split's JVM was shut down


@pytest.mark.slow
def test_text_actions_score_and_close_frees_the_jvm():
    from evolvekit.config import EnvConfig
    from evolvekit.env.action_text import parse_action
    from evolvekit.env.registry import env_tasks, make_env

    task = env_tasks(EnvConfig(name="scienceworld"), "dev")[0]
    env = make_env("scienceworld")
    assert _java_children(expect=1) == 1
    reset = env.reset(task)
    assert "Your task is to" in reset.observation and "open OBJ" in reset.system
    step = env.step(parse_action("look around"))
    assert step.new_turn and "This room is called" in step.observation
    assert env.step(parse_action("dance wildly")).observation == "No known action matches that input."
    assert env.evaluate().score < 1.0 and env.info().steps == 2
    env.close()
    assert _java_children(expect=0) == 0
    env.close()  # twice is fine


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=900, cwd=cwd
    )


@pytest.mark.slow
def test_eval_and_a_short_run_from_the_command_line(tmp_path, tiny_roles):
    """The simulator answers every action of an evaluation and a run (their wiring: every role the tiny model)."""
    small = ["--set", "rollout.max_steps=2", "--set", "models.policy.max_new_tokens=12", *tiny_roles]
    res = _cli("eval", "--env", "scienceworld", "--subset", "test", "--limit", "1", "--k", "1", "--json", *small,
               "--out", str(tmp_path / "ev.jsonl"), cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["env"] == "scienceworld" and out["tasks"] == 1 and out["failed_rollouts"] == 0
    traj = json.loads((tmp_path / "ev.trajectories.jsonl").read_text().splitlines()[0])
    assert len(traj["steps"]) == 2 and traj["steps"][0]["observation"]  # the simulator answered each action
    grpo = str(Path(__file__).resolve().parents[2] / "configs" / "grpo.yaml")
    res = _cli("run", grpo, "--json", "--no-progress", "--set", "env.name=scienceworld", "--set", "env.family=null",
               "--set", f"run.out_dir={tmp_path}",
               "--set", "train.iterations=1", "--set", "train.tasks_per_iteration=1", "--set", "rollout.group_size=2",
               "--set", "train.eval_before=false", "--set", "train.eval_after=false", *small, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    metrics = json.loads(open(summary["metrics"]).read().splitlines()[0])
    assert metrics["rollout/steps_mean"] == 2.0 and "train/loss" in metrics


@pytest.mark.slow
@pytest.mark.parametrize(
    "sandbox, field",
    [
        ({"task_name": "no-such-task"}, "sandbox_config.task_name"),
        ({"task_name": ["boil"]}, "sandbox_config.task_name"),
        ({"variation": "abc"}, "sandbox_config.variation"),
        ({"variation": -1}, "sandbox_config.variation"),
    ],
)
def test_a_bad_sandbox_config_is_one_env_error_naming_the_field(sandbox, field):
    """Issue 52 (3): a bad ScienceWorld sandbox_config gave the service a 500 (the simulator's own exception)."""
    from evolvekit.env.registry import make_env
    from evolvekit.errors import EnvError

    env = make_env("scienceworld")
    try:
        with pytest.raises(EnvError, match=field):
            env.reset(None, sandbox)
    finally:
        env.close()


@pytest.mark.slow
def test_the_stepwise_start_builds_what_the_librarys_constructor_builds():
    """``_start_simulator`` is ScienceWorld's own constructor in steps: the same attributes, and a working
    simulator."""
    from scienceworld import ScienceWorldEnv as _SW

    from evolvekit.env.scienceworld import _close, _start_simulator

    theirs, ours = _SW("", envStepLimit=7), _start_simulator(7)
    try:
        assert set(vars(ours)) == set(vars(theirs)) and ours.envStepLimit == 7
        ours.load("boil", 0, "", generateGoldPath=False)
        assert "Your task is to" in ours.get_task_description()
    finally:
        _close(theirs), _close(ours)
    assert _java_children(expect=0) == 0


@pytest.mark.slow
def test_a_start_past_its_deadline_kills_its_jvm_and_says_cancelled():
    """Issue 52 (3, 'work that is cancelled, not orphaned'): a JVM still starting at its request's deadline is
    killed then, not left to finish starting and closed afterwards."""
    from evolvekit.env.cancel import Cancelled, deadline
    from evolvekit.env.scienceworld import ScienceWorldEnv

    t0 = time.monotonic()
    with pytest.raises(Cancelled), deadline(time.monotonic() + 0.05):  # the JVM alone takes ~0.1 s to print its port
        ScienceWorldEnv()
    assert time.monotonic() - t0 < 0.9  # the whole start takes ~1.1 s alone, 5-6 s on a busy machine
    assert _java_children(expect=0) == 0


@pytest.mark.slow
def test_a_reset_past_its_deadline_kills_the_jvm_and_one_in_time_leaves_it_running():
    from evolvekit.env.cancel import Cancelled, deadline
    from evolvekit.env.scienceworld import ScienceWorldEnv

    env = ScienceWorldEnv()
    try:
        with deadline(time.monotonic() + 30):
            env.reset(None, {"task_name": "boil", "variation": 0})
        time.sleep(0.2)
        assert _java_children(expect=1) == 1 and "This room" in env.step(_look()).observation  # no stop ran
        with pytest.raises(Cancelled), deadline(time.monotonic() - 1):
            env.reset(None, {"task_name": "boil", "variation": 1})
        assert _java_children(expect=0) == 0
    finally:
        env.close()


def _look():
    from evolvekit.env.action_text import parse_action

    return parse_action("look around")


@pytest.mark.slow
def test_a_create_past_its_deadline_answers_504_and_leaves_no_jvm():
    """Issue 52 (3, 4): `env serve` answers a ScienceWorld /create that passes create_timeout_s with a 504, and the
    JVM that was starting is gone by then, not closed later."""
    import httpx
    from conftest import serving

    from evolvekit.env.service.server import ServiceSettings, create_app

    settings = ServiceSettings(envs=("scienceworld",), create_timeout_s=0.3)
    with serving(create_app(settings)) as url:
        t0 = time.monotonic()
        r = httpx.post(url + "/create", json={"env": "scienceworld"}, timeout=30)
        assert r.status_code == 504 and "exceeded 0.3s" in r.json()["detail"]
        assert time.monotonic() - t0 < 0.9  # the whole start takes ~1.1 s alone
        until = time.monotonic() + 0.4  # a killed JVM exits within milliseconds; left to start, it runs ~1 s more
        while _java_children() and time.monotonic() < until:
            time.sleep(0.02)
        assert _java_children() == 0
        assert httpx.get(url + "/healthz").status_code == 200
