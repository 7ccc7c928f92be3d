"""OpenEnv environment servers as environments (``env.name: openenv``), against a real server: openenv-core's own
``create_app`` serving tests/plugins/openenv_counter_server.py from the virtual environment scripts/setup.sh makes
for it (.venv/openenv-server). Malformed replies come from a WebSocket server written here."""

import json
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evolvekit.config import EnvConfig
from evolvekit.env.base import Action, ToolSchema
from evolvekit.env.openenv import OpenEnvEnv, base_urls, openenv_available
from evolvekit.env.registry import env_tasks, make_env
from evolvekit.errors import EnvError
from evolvekit.types import Task, TaskSource, ToolCall

ROOT = Path(__file__).resolve().parents[2]
SERVER_PY = ROOT / ".venv/openenv-server/bin/python"
pytestmark = [
    pytest.mark.skipif(openenv_available() is not None, reason=str(openenv_available())),
    pytest.mark.skipif(not SERVER_PY.exists(), reason="openenv-core's environment is missing (setup.sh --tests)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [str(SERVER_PY), str(ROOT / "tests/plugins/openenv_counter_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the OpenEnv server exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _cfg(url: str, **openenv) -> EnvConfig:
    # examples written here are person-written: shown only behind the explicit switch
    shown = "person" if openenv.get("examples") else "self"
    return EnvConfig(
        name="openenv", worked_examples=shown, openenv={"url": url, "instructions": "Reach the target.", **openenv}
    )


def _step(n) -> Action:
    return Action(tool_calls=[ToolCall(name="step", arguments={"n": n})])


@pytest.mark.slow
def test_tasks_are_reset_seeds_and_the_splits_never_share_one(server):
    cfg = _cfg(server, episodes=5)
    train, test = env_tasks(cfg, "train"), env_tasks(cfg, "test")
    assert [t.metadata["seed"] for t in train] == [0, 1, 2, 3, 4]
    assert [t.metadata["seed"] for t in test] == [100_000 + i for i in range(5)]
    assert {t.task_id for t in train}.isdisjoint(t.task_id for t in test)
    # the request is the instructions and the observation that seed's reset returns, without done/reward/metadata
    first = json.loads(train[0].query.split("\n\n", 1)[1])
    assert train[0].query.startswith("Reach the target.") and set(first) == {"counter", "target", "message"}
    again = env_tasks(cfg, "train")
    assert [t.query for t in again] == [t.query for t in train]  # a seed's episode is the same every time


def test_an_episode_reaches_its_target_and_is_scored_by_the_servers_reward(server):
    cfg = _cfg(server, episodes=3)
    task = env_tasks(cfg, "test")[0]
    target = json.loads(task.query.split("\n\n", 1)[1])["target"]
    env = make_env(cfg)
    reset = env.reset(task)
    assert reset.observation == task.query
    (tool,) = reset.tools
    assert (
        tool.name == "step" and tool.parameters["required"] == ["n"] and "metadata" not in tool.parameters["properties"]
    )
    assert "counter" in env.profile()[0].name
    before = env.state_key()
    step = env.step(_step(1))
    assert step.call_results[0].ok and json.loads(step.observation.split("] ", 1)[1])["counter"] == 1
    assert not step.done and env.state_key() != before
    refused = env.step(_step("one"))  # an action the server's schema refuses: an error observation, not a crash
    assert not refused.call_results[0].ok and refused.call_results[0].output.startswith("Error:") and not refused.done
    unknown = env.step(Action(tool_calls=[ToolCall(name="jump", arguments={})]))
    assert unknown.call_results[0].unknown_tool
    assert env.evaluate().score == 0.0
    last = env.step(_step(target - 1))
    assert last.done and last.reward == 1.0
    result = env.evaluate()
    assert result.passed and result.score == 1.0 and result.details["return"] == 1.0
    assert env.step(_step(1)).error == "episode_done"
    env.close()
    env.close()  # twice is fine


def test_overshooting_fails_and_a_message_without_calls_ends_the_episode(server):
    cfg = _cfg(server, episodes=1)
    task = env_tasks(cfg, "train")[0]
    env = make_env(cfg)
    env.reset(task)
    over = env.step(_step(50))
    assert over.done and over.reward == 0.0 and env.evaluate().score == 0.0
    env.reset(task)
    assert env.step(Action(text="I give up.")).done and not env.evaluate().passed
    env.close()


def test_concurrent_episodes_have_their_own_server_instance(server):
    cfg = _cfg(server, episodes=1)
    task = env_tasks(cfg, "train")[0]
    envs = [make_env(cfg) for _ in range(4)]
    errors: list[BaseException] = []

    def play(i: int) -> None:
        try:
            envs[i].reset(task)
            for _ in range(i):
                envs[i].step(_step(0))
            envs[i].step(_step(1))
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=play, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    states = [e.state() for e in envs]  # type: ignore[attr-defined]
    assert [s["step_count"] for s in states] == [1, 2, 3, 4]  # each session counted only its own steps
    assert all(s["counter"] == 1 for s in states) and len({s["episode_id"] for s in states}) == 4
    for e in envs:
        e.close()


def test_a_synthesized_task_shows_its_request_and_sandbox_mode_has_no_score(server):
    env = make_env(_cfg(server))
    task = Task(task_id="syn-1", env_name="openenv", query="Add 2 twice.", source=TaskSource.SYNTHETIC)
    assert env.reset(task).observation.startswith("Add 2 twice.\n\n{")
    env.reset(None)
    assert env.info().sandbox
    with pytest.raises(EnvError, match="sandbox"):
        env.evaluate()
    env.close()


@pytest.mark.slow
def test_urls_and_configuration_errors(server):
    assert base_urls("http://h:1/") == ("http://h:1", "ws://h:1/ws")
    assert base_urls("wss://h/env") == ("https://h/env", "wss://h/env/ws")
    with pytest.raises(EnvError, match="env.openenv.url"):
        base_urls("ftp://h")
    with pytest.raises(EnvError, match="env.openenv.url"):
        OpenEnvEnv(EnvConfig(name="openenv"))
    env = OpenEnvEnv(_cfg(f"http://127.0.0.1:{_free_port()}"))  # nothing listens there
    with pytest.raises(EnvError, match="OpenEnv GET /schema"):
        env.reset(None)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "evolvekit.cli.main",
            "config",
            "validate",
            str(ROOT / "configs/grpo.yaml"),
            "--set",
            "env.name=openenv",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "env.openenv.url" in res.stderr


def _target(seed: int) -> int:  # the test server's target for a seed
    return random.Random(seed).randint(2, 9)


def _example(seed: int = 7) -> dict:
    return {"seed": seed, "actions": [{"n": 1}, {"n": _target(seed) - 1}], "final": "The counter is at the target."}


@pytest.mark.slow
def test_worked_examples_are_played_on_the_server_and_shown_as_chat_turns(server):
    env = make_env(_cfg(server, examples=[_example()]))
    messages = env.reset(env_tasks(_cfg(server, episodes=1), "train")[0]).examples
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert f'"target": {_target(7)}' in messages[0].content and '"n": 1' in messages[1].content
    assert '"message": "Target reached."' in messages[4].content  # the server's real observation
    env.close()
    bad = make_env(_cfg(server, examples=[{"seed": 7, "actions": [{"n": 99}]}]))
    with pytest.raises(EnvError, match=r"examples\[0\].*success_return"):
        bad.reset(None)
    refused = make_env(_cfg(server, examples=[{"seed": 7, "actions": [{"m": 1}]}]))
    with pytest.raises(EnvError, match=r"examples\[0\]: the server refused"):
        refused.reset(None)


@pytest.mark.parametrize(
    "reply, match",
    [
        ("not json", "not JSON"),
        (json.dumps({"type": "observation"}), r"not \{type, data\}"),
        (json.dumps([1, 2]), r"not \{type, data\}"),
        (json.dumps({"type": "state", "data": {}}), "expected an observation reply"),
        (json.dumps({"type": "observation", "data": {"observation": {}, "reward": "1"}}), "reward is not a number"),
        (json.dumps({"type": "observation", "data": {"observation": {}, "done": "yes"}}), "done is not a boolean"),
    ],
)
def test_a_malformed_reply_is_an_env_error_naming_the_message(reply, match):
    from websockets.sync.server import serve

    good = json.dumps({"type": "observation", "data": {"observation": {"x": 1}, "reward": 0, "done": False}})

    def handler(ws):
        for raw in ws:
            ws.send(good if json.loads(raw)["type"] == "reset" else reply)

    with serve(handler, "127.0.0.1", 0) as ws_server:
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        port = ws_server.socket.getsockname()[1]
        env = OpenEnvEnv(_cfg(f"http://127.0.0.1:{port}"))
        env._tool = ToolSchema(name="step", parameters={"type": "object", "properties": {"n": {"type": "integer"}}})
        env.reset(Task(task_id="t", env_name="openenv", query="q", metadata={"seed": 0}))
        with pytest.raises(EnvError, match=rf"OpenEnv step: .*{match}"):
            env.step(_step(1))
        env.close()
        ws_server.shutdown()


@pytest.mark.slow
def test_eval_and_a_short_run_from_the_command_line_with_the_embedded_model(server, tmp_path, tiny_roles):
    """The embedded model, shown the environment's worked examples, acts through the step tool and the server
    answers; a short run on the same config trains (its wiring: every role the tiny model there)."""
    config = tmp_path / "openenv.yaml"
    env = {"name": "openenv", "family": None, "worked_examples": "person",  # the examples below are person-written
           "openenv": {"url": server, "examples": [_example(7), _example(11)],
                       "instructions": "Bring the counter to the target with the step tool."}}  # fmt: skip
    small = {"max_steps": 3, "group_size": 2}
    config.write_text(json.dumps({"env": env, "rollout": small, "models": {"policy": {"max_new_tokens": 24}}}))
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "eval", "-c", str(config), "--subset", "test", "--limit", "2",
         "--k", "2", "--json", "--out", str(tmp_path / "ev.jsonl")],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["env"] == "openenv" and out["tasks"] == 2 and out["failed_rollouts"] == 0
    trajs = [json.loads(line) for line in (tmp_path / "ev.trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 4 and all(t["task_id"].startswith("openenv-test-1000") for t in trajs)
    # with the worked examples the model acts through the step tool and the server answers
    assert any(
        s["calls"] and s["calls"][0]["ok"] and '"counter"' in s["observation"] for t in trajs for s in t["steps"]
    )
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "run", str(config), "--json", "--no-progress",
         "--set", f"run.out_dir={tmp_path}", "--set", "train.iterations=1", "--set", "train.tasks_per_iteration=1",
         "--set", "train.eval_before=false", "--set", "train.eval_after=false", *tiny_roles],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    metrics = json.loads(open(summary["metrics"]).read().splitlines()[0])
    assert "train/loss" in metrics and metrics["rollout/steps_mean"] >= 1


@pytest.mark.slow
def test_env_check_resets_every_task_when_none_has_a_reference(server):
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "env", "check", "--set", "env.name=openenv",
         "--set", f"env.openenv.url={server}", "--limit", "3", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["env"] == "openenv" and out["split"] == "test" and out["without_reference"] == 3 and out["total"] == 0
