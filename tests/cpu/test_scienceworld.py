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


def _java_children(expect: int | None = None) -> int:
    """Live JVMs started by this process (waiting up to 5 s for the expected count: a JVM exits asynchronously)."""
    deadline = time.monotonic() + 5
    while True:
        procs = psutil.Process(os.getpid()).children(recursive=True)
        n = sum(p.name() == "java" and p.status() != psutil.STATUS_ZOMBIE for p in procs)
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
def test_eval_and_a_short_run_from_the_command_line(tmp_path):
    small = ["--set", "rollout.max_steps=2", "--set", "models.policy.max_new_tokens=12"]
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
