"""The environment of docs/environments.md ("Bring your own environment") works as the docs say: registered by its
plugin module, its tasks split, its episodes scored, and the rollout machinery runs on it."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_counter_environment_runs_an_episode(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from evolvekit.config import EnvConfig
    from evolvekit.env.action_text import parse_action
    from evolvekit.env.registry import env_tasks, make_env

    cfg = EnvConfig(name="counter", plugins=["examples.counter_env"])
    train, test = env_tasks(cfg, "train"), env_tasks(cfg, "test")
    assert not {t.query for t in train} & {t.query for t in test}
    env = make_env(cfg)
    task = test[3]
    reset = env.reset(task)
    assert reset.observation == "Bring the counter to 203." and reset.tools[0].name == "add"
    step = env.step(parse_action('<tool_call>{"name": "add", "arguments": {"n": 200}}</tool_call>'))
    assert step.observation == "counter = 200" and not step.done
    env.step(parse_action('<tool_call>{"name": "add", "arguments": {"n": 3}}</tool_call>'))
    assert env.step(parse_action("Done.")).done and env.evaluate().passed
    env.reset(task)
    env.step(parse_action("Done."))
    assert env.evaluate().score == 0.0
    assert len((ROOT / "examples" / "counter_env.py").read_text().split("@register_env")[1].splitlines()) < 45
    assert "examples.counter_env" in sys.modules


def _cli(*args):
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=900, cwd=ROOT
    )


@pytest.mark.slow
def test_the_docs_commands_run_on_the_counter_environment(tmp_path):
    import json

    plugin = ["--set", "env.name=counter", "--set", "env.plugins=[examples.counter_env]"]
    small = ["--set", "models.policy.max_new_tokens=16", "--set", "rollout.max_steps=2"]
    res = _cli("eval", *plugin, *small, "--subset", "test", "--limit", "2", "--k", "1", "--json",
               "--out", str(tmp_path / "ev.jsonl"))  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["env"] == "counter" and out["tasks"] == 2 and out["failed_rollouts"] == 0
    budget = ["train.iterations=1", "train.tasks_per_iteration=1", "rollout.group_size=2", "train.eval_tasks=1"]
    budget += ["train.eval_k=1", "env.family=null", f"run.out_dir={tmp_path}"]
    sets = [a for b in budget for a in ("--set", b)]
    res = _cli("run", "configs/grpo.yaml", *plugin, *small, *sets, "--json", "--no-progress")
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["iterations"] == 1 and summary["eval_after"]["tasks"] == 1
    res = _cli("eval", "--set", "env.name=counter", "--set", "env.plugins=[examples.nope]", "--limit", "1")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "examples.nope" in res.stderr
