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
    assert [(r.name, r.ok, r.output) for r in step.call_results] == [("add", True, "counter = 200")]
    # each call says whether it worked (what exploration and curation read): a refused call and an unknown tool
    bad = env.step(parse_action('<tool_call>{"name": "add", "arguments": {}}</tool_call>'))
    assert [(r.ok, r.unknown_tool, r.output) for r in bad.call_results] == [(False, False, "error: 'n'")]
    unknown = env.step(parse_action('<tool_call>{"name": "mul", "arguments": {"n": 2}}</tool_call>'))
    assert [(r.ok, r.unknown_tool) for r in unknown.call_results] == [(False, True)] and env.value == 200
    env.step(parse_action('<tool_call>{"name": "add", "arguments": {"n": 3}}</tool_call>'))
    assert env.step(parse_action("Done.")).done and env.evaluate().passed
    env.reset(task)
    env.step(parse_action("Done."))
    assert env.evaluate().score == 0.0
    assert len((ROOT / "examples" / "counter_env.py").read_text().split("@register_env")[1].splitlines()) < 50
    assert "examples.counter_env" in sys.modules


def test_execute_calls_gives_each_call_its_result_and_a_step_without_results_is_warned_once(caplog):
    """Issue 78: a plugin written from the docs returned no call_results, so every explored call counted as failed
    and no task was kept, silently. execute_calls makes them; exploration warns once when a step returns none."""
    import logging

    from evolvekit.env.base import StepResult, ToolSchema, execute_calls
    from evolvekit.questioning.explore import warn_no_call_results
    from evolvekit.types import ToolCall

    def run(call):
        if call.arguments.get("x", 0) < 0:
            raise ValueError("x must not be negative")
        return call.arguments.get("x")

    tools = [ToolSchema(name="f")]
    calls = [ToolCall(name="f", arguments={"x": 2}), ToolCall(name="f", arguments={"x": -1}), ToolCall(name="g")]
    observation, results = execute_calls(calls, run, tools)
    assert [(r.name, r.ok, r.unknown_tool, r.output) for r in results] == [
        ("f", True, False, "2"),
        ("f", False, False, "error: x must not be negative"),
        ("g", False, True, "error: no tool 'g'"),
    ]
    assert observation == "2\nerror: x must not be negative\nerror: no tool 'g'"
    assert [r.ok for r in execute_calls(calls[2:], run)[1]] == [True]  # no tool list: every name is run

    class Silent:  # a step that executes calls and says nothing of them
        def step(self, action):
            return StepResult(observation="done")

    with caplog.at_level(logging.WARNING, logger="evolvekit.questioning.explore"):
        warn_no_call_results(Silent(), 2)
        warn_no_call_results(Silent(), 3)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("Silent.step: 2 tool call(s) and no call_results: every call counts as failed")


def _cli(*args):
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=900, cwd=ROOT
    )


@pytest.mark.slow
def test_the_docs_commands_run_on_the_counter_environment(tmp_path, tiny_roles):
    """The documented commands on the example plugin: its loading, evaluation and a run are the claim, so every
    role is the tiny model."""
    import json

    plugin = ["--set", "env.name=counter", "--set", "env.plugins=[examples.counter_env]"]
    small = ["--set", "models.policy.max_new_tokens=16", "--set", "rollout.max_steps=2", *tiny_roles]
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


# the docs plugin's settings: the small-model filter (questioning.grounding_threshold 1, one operation a task), the
# scaffolded synthesizer's own requests and the documented examples as before issue 96 (in two rounds the
# back-translated requests kept no task here: 24 synthesized, 11 ungrounded, 5 trivial, 5 duplicates, 2 infeasible,
# 1 with no round trip; a limit of issue 96, in its note), and the least exploration that keeps a task at seed 0 in
# two rounds (2 runs of 8 steps; issue 97: the defaults' 4 runs of 30 steps took 4 of the test's 9 minutes, twice)
DOCS_BANK = ["env.name=docs_bank", "env.plugins=[docs_bank_env]", "env.family=null"]
DOCS_BANK += ["questioning.difficulty.operations=1", "questioning.grounding_threshold=1"]
DOCS_BANK += ["questioning.requests.mode=documented", "questioning.explore_runs=2", "questioning.explore_steps=8"]


def _docs_bank_well_posed(tmp_path: Path):
    """The docs plugin copied into the user's working folder, and the check that a task is well-posed there: it
    replays its reference to a pass, is not passed when the agent does nothing, and its request states its
    reference's values."""
    import shutil

    from evolvekit.config import load_config
    from evolvekit.env.registry import make_env
    from evolvekit.questioning.curate import argument_values, passes_without_acting, replay_feasible
    from evolvekit.types import Task

    shutil.copy(ROOT / "tests" / "plugins" / "docs_bank_env.py", tmp_path / "docs_bank_env.py")
    cfg = load_config(None, DOCS_BANK)

    def well_posed(task: Task) -> None:
        assert replay_feasible(task, lambda: make_env(cfg.env)) == (True, "")
        assert not passes_without_acting(task, lambda: make_env(cfg.env)), task.query
        values = [v for turn in task.reference_solution or [] for c in turn for v in argument_values(c.arguments)]
        assert values and all(str(v) in task.query for v in values), task.query

    return well_posed


@pytest.fixture
def docs_bank(tmp_path):
    sys.path.insert(0, str(tmp_path))
    try:
        yield _docs_bank_well_posed(tmp_path)
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.slow
def test_a_plugin_written_from_the_docs_alone_keeps_well_posed_tasks(tmp_path, docs_bank):
    """Issue 78.1: a new 4-tool plugin written from docs/environments.md alone (tests/plugins/docs_bank_env.py, copied
    into the user's working folder) gets kept tasks from `tasks synthesize` that are well-posed: each replays its
    reference to a pass, none passes when the agent does nothing, each request states its reference's values
    (DOCS_BANK's settings, seed 0)."""
    import json
    import subprocess

    from evolvekit.types import Task

    args = [a for s in DOCS_BANK for a in ("--set", s)]
    out = tmp_path / "tasks.jsonl"
    syn = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "tasks", "synthesize", *args, "--n", "1", "--max-rounds", "2",
         "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=2300, cwd=tmp_path,
    )  # fmt: skip
    assert syn.returncode == 0, syn.stderr[-3000:]
    funnel = json.loads(syn.stdout.strip().splitlines()[-1])
    kept = [Task.model_validate_json(line) for line in out.read_text().splitlines()]
    assert funnel["kept"] == len(kept) >= 1 and funnel["explored_calls"] >= 1, syn.stderr[-3000:]
    for task in kept:  # checked again here, outside the pipeline
        docs_bank(task)


@pytest.mark.slow
def test_a_run_on_a_plugin_written_from_the_docs_keeps_and_trains_on_its_own_tasks(tmp_path, docs_bank, tiny_model):
    """Issue 78.1: one iteration of `run` on the docs plugin with self-questioning alone, as the docs say for an
    environment with no tasks of its own (λ = 1; no held-out tasks: evaluation off): it keeps a task of its own
    synthesis (DOCS_BANK's settings, seed 0), stores only synthetic tasks, each well-posed, and trains on them alone.
    The policy is the tiny model (its skill is no claim here); the explorer and synthesizer are the embedded model."""
    import json
    import subprocess

    import yaml

    config = tmp_path / "bank.yaml"  # a user's own config: the same environment and synthesis settings
    config.write_text(yaml.safe_dump({"run": {"name": "bank", "out_dir": str(tmp_path / "runs"), "seed": 0}}))
    sets = [*DOCS_BANK, "questioning.enabled=true", "questioning.hybrid_lambda=1.0", "questioning.synthetic_tasks=1"]
    sets += ["train.iterations=1", "train.tasks_per_iteration=1", "rollout.group_size=2", "rollout.max_steps=3"]
    sets += ["train.eval_before=false", "train.eval_after=false", "train.eval_every=0"]
    sets += [f"models.policy.model={tiny_model}"]
    args = [a for s in sets for a in ("--set", s)]
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "run", str(config), *args, "--json", "--no-progress"],
        capture_output=True, text=True, timeout=2300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["iterations"] == 1 and summary["gold"] == "none"
    _the_runs_tasks_are_its_own_and_well_posed(Path(summary["store"]), docs_bank)


def _the_runs_tasks_are_its_own_and_well_posed(store: Path, well_posed) -> None:
    import sqlite3

    from evolvekit.types import Task

    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT source, json FROM tasks").fetchall()
        trained = {r[0] for r in db.execute("SELECT task_id FROM trajectories WHERE phase = 'train'")}
    assert rows and {source for source, _ in rows} == {"synthetic"}
    tasks = [Task.model_validate_json(text) for _, text in rows]
    for task in tasks:
        well_posed(task)
    assert trained and trained <= {t.task_id for t in tasks}
