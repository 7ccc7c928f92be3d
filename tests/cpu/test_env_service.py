"""The environment service on a free loopback port, exercised through the client and raw HTTP."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import serving

from evolvekit.engine.base import Engine
from evolvekit.env.base import Action, EnvInfo, EvalResult, ResetResult, StepResult
from evolvekit.env.bfcl import data
from evolvekit.env.cancel import Cancelled, checkpoint
from evolvekit.env.registry import register_env
from evolvekit.env.service.client import RemoteEnv
from evolvekit.env.service.server import ServiceSettings, create_app
from evolvekit.errors import EnvError
from evolvekit.types import ToolCall

TOKEN = "test-token"


class SlowEnv:
    """Steps sleep for the seconds their text says, in slices with a cancellation checkpoint between them; a reset
    with sandbox_config {"sleep": s, "cooperative": bool} sleeps too, with or without checkpoints."""

    name = "slow-test"
    cancelled: list[str] = []  # what was cancelled, in order
    closed = 0

    def profile(self):
        return []

    @staticmethod
    def _sleep(seconds, what, cooperative=True):
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                if cooperative:
                    checkpoint()
                time.sleep(0.01)
        except Cancelled:
            SlowEnv.cancelled.append(what)
            raise

    def reset(self, task=None, sandbox_config=None):
        cfg = sandbox_config or {}
        self._sleep(float(cfg.get("sleep", 0)), "reset", cfg.get("cooperative", True))
        return ResetResult(observation="ready", tools=[])

    def step(self, action):
        text = action.text or "0"
        if text.startswith("blocking:"):  # a call that cannot check in (a JVM's step): it ends only when closed
            self._gone = getattr(self, "_gone", threading.Event())
            if self._gone.wait(float(text.split(":", 1)[1])):
                SlowEnv.cancelled.append("blocking step ended by close")
                raise RuntimeError("the environment was closed under the call")
            return StepResult(observation="slept")
        self._sleep(float(text), "step")
        return StepResult(observation="slept")

    def evaluate(self, trajectory=None):
        return EvalResult(score=1.0, passed=True)

    def info(self):
        return EnvInfo(env_name=self.name)

    def close(self):
        SlowEnv.closed += 1
        self._gone = getattr(self, "_gone", threading.Event())
        self._gone.set()


register_env("slow-test", "test-only environment whose steps sleep")(lambda cfg: SlowEnv())


@pytest.fixture(scope="module")
def service():
    settings = ServiceSettings(
        token=TOKEN, step_timeout_s=0.5, idle_ttl_s=2.0, reap_interval_s=0.5, max_body_bytes=200_000
    )
    app = create_app(settings)
    with serving(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def task0():
    return next(t for t in data.load_tasks("multi_turn_base") if t.task_id == "multi_turn_base_0")


def test_episode_through_client_passes(service, task0):
    url, _ = service
    env = RemoteEnv(url, token=TOKEN)
    first = env.reset(task0)
    assert first.observation == task0.turns[0] and first.tools
    for turn in task0.reference_solution:
        for call in turn:
            env.step(Action(tool_calls=[call]))
        env.step(Action(text="done"))
    assert env.info().done
    assert env.evaluate().passed
    assert env.profile()[0].env_name == "bfcl"
    env.close()


def test_requests_without_token_get_401(service):
    url, _ = service
    assert httpx.post(url + "/create", json={"env": "bfcl"}).status_code == 401
    assert (
        httpx.post(url + "/create", json={"env": "bfcl"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    )
    assert httpx.get(url + "/healthz").status_code == 200
    with pytest.raises(EnvError, match="401"):
        RemoteEnv(url, token=None).reset(None)


def test_malformed_bodies_get_4xx_naming_the_problem(service):
    url, _ = service
    h = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(url + "/step", json={"instance_id": "x"}, headers=h)
    assert r.status_code == 422 and "action" in r.json()["detail"]
    r = httpx.post(url + "/step", content=b"{not json", headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 422
    r = httpx.post(url + "/create", json={"env": "bfcl", "surprise": 1}, headers=h)
    assert r.status_code == 422 and "surprise" in r.json()["detail"]
    r = httpx.post(url + "/step", json={"instance_id": "nope", "action": {"text": "hi"}}, headers=h)
    assert r.status_code == 404
    r = httpx.post(url + "/create", json={"env": "no-such-env"}, headers=h)
    assert r.status_code == 400 and "unknown environment" in r.json()["detail"]
    big = {"env": "bfcl", "sandbox_config": {"blob": "x" * 300_000}}
    assert httpx.post(url + "/create", json=big, headers=h).status_code == 413


def test_step_timeout_marks_instance_broken(service):
    url, _ = service
    env = RemoteEnv(url, env="slow-test", token=TOKEN)
    env.reset(None)
    assert env.step(Action(text="0")).observation == "slept"
    SlowEnv.cancelled.clear()
    with pytest.raises(EnvError, match="504"):
        env.step(Action(text="1.5"))
    time.sleep(0.2)
    assert SlowEnv.cancelled == ["step"]  # issue 52 (6): the work stopped at its deadline, not orphaned for 1.5 s
    with pytest.raises(EnvError, match="409"):
        env.step(Action(text="0"))
    env.close()


def test_a_step_that_cannot_check_in_ends_when_its_environment_is_closed_at_the_deadline(service):
    """Issue 52 (4, 6): a single blocking call (a ScienceWorld step inside its JVM) ran to its end past the step
    timeout, holding a worker thread. At the deadline the broken instance's environment is closed beside the call,
    which ends it; release closes it again, harmlessly."""
    url, _ = service
    env = RemoteEnv(url, env="slow-test", token=TOKEN)
    env.reset(None)
    SlowEnv.cancelled.clear()
    closed = SlowEnv.closed
    t0 = time.monotonic()
    with pytest.raises(EnvError, match="504"):
        env.step(Action(text="blocking:5"))
    for _ in range(100):
        if SlowEnv.cancelled:
            break
        time.sleep(0.02)
    assert SlowEnv.cancelled == ["blocking step ended by close"] and time.monotonic() - t0 < 3.0
    assert SlowEnv.closed == closed + 1
    env.close()  # release: closed a second time, no error
    assert SlowEnv.closed == closed + 2


@pytest.mark.slow
def test_create_past_its_deadline_is_cancelled_or_closed_never_leaked():
    """Issue 52 (1, 6): /create had no timeout. Building and resetting now has one (504); a reset that checks in
    is cancelled at it, and one that cannot be interrupted is closed when it finishes, not left running unowned."""
    settings = ServiceSettings(token=TOKEN, create_timeout_s=0.4, envs=("slow-test",))
    h = {"Authorization": f"Bearer {TOKEN}"}
    with serving(create_app(settings)) as url:
        for cooperative in (True, False):
            SlowEnv.cancelled.clear()
            closed = SlowEnv.closed
            body = {"env": "slow-test", "sandbox_config": {"sleep": 1.2, "cooperative": cooperative}}
            t0 = time.monotonic()
            r = httpx.post(url + "/create", json=body, headers=h, timeout=10)
            assert r.status_code == 504 and "0.4s" in r.json()["detail"], r.text
            assert time.monotonic() - t0 < 1.0
            time.sleep(0.2 if cooperative else 1.2)
            assert SlowEnv.cancelled == (["reset"] if cooperative else [])
            assert SlowEnv.closed == closed + 1  # the half-built environment was closed either way
        r = httpx.post(url + "/create", json={"env": "slow-test"}, headers=h)
        assert r.status_code == 200  # a quick one is served


def test_concurrent_episodes_never_share_state(service, task0):
    url, _ = service

    def episode(i):
        env = RemoteEnv(url, token=TOKEN)
        env.reset(task0)
        env.step(Action(tool_calls=[ToolCall(name="mkdir", arguments={"dir_name": f"dir_{i}"})]))
        listing = env.step(Action(tool_calls=[ToolCall(name="ls", arguments={})])).observation
        env.close()
        return i, listing

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(episode, range(8)))
    for i, listing in results:
        assert f"dir_{i}" in listing
        assert not any(f"dir_{j}" in listing for j in range(8) if j != i)


@pytest.mark.slow
def test_idle_instances_are_reaped(service):
    url, app = service
    env = RemoteEnv(url, env="slow-test", token=TOKEN)
    env.reset(None)
    iid = env.instance_id
    assert iid in app.state.service.instances
    deadline = time.time() + 6
    while iid in app.state.service.instances and time.time() < deadline:
        time.sleep(0.2)
    assert iid not in app.state.service.instances


class _Oracle:
    """Test double of the policy: calls the task's reference solution, then ends the turn."""

    name = "oracle"

    def __init__(self, tasks):
        self.by_query = {t.turns[0]: t.reference_solution[0][0] for t in tasks}

    def chat(self, conversations, params):
        from evolvekit.env.action_text import format_call
        from evolvekit.llm.base import Completion

        out = []
        for conv in conversations:
            if conv[-1].content.startswith("Tool results"):
                text = "Done."
            else:
                text = format_call(self.by_query[conv[-1].content])
            out.append([Completion(text=text, token_ids=[1], prompt_token_ids=[1, 2])])
        return out


def test_rollouts_through_the_service(service, monkeypatch):
    from evolvekit.agent.rollout import RolloutJob, run_rollouts
    from evolvekit.config import EnvConfig, RolloutConfig
    from evolvekit.env.registry import env_tasks, make_env
    from evolvekit.llm.base import SamplingParams

    url, _ = service
    monkeypatch.setenv("EVOLVEKIT_ENV_TOKEN", TOKEN)
    cfg = EnvConfig(name="bfcl", family="arith", service_url=url)
    tasks = env_tasks(cfg, "test")[:3]
    envs = []

    def factory():
        env = make_env(cfg)
        envs.append(env)
        return env

    trajs = run_rollouts(
        [RolloutJob(task=t) for t in tasks],
        factory,
        Engine(_Oracle(tasks)),
        RolloutConfig(max_steps=3, concurrency=3),
        SamplingParams(),
        show_progress=False,
    )
    from evolvekit.env.examples import unwrapped

    assert all(isinstance(unwrapped(e), RemoteEnv) for e in envs) and len(envs) == 3
    assert [t.outcome_reward for t in trajs] == [1.0, 1.0, 1.0]
    assert all(len(t.steps) == 2 and not t.flags.failed for t in trajs)
