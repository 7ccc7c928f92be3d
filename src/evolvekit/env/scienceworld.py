"""ScienceWorld (optional extra ``scienceworld``; needs Java): text actions scored by the simulator.

Tasks are the simulator's task types × variations, split by ScienceWorld's own train/dev/test variation lists
(``scienceworld_tasks``), interleaved across task types so that the first N tasks of a split cover many types. The
policy acts in text: the system prompt lists the action templates, every message is one action (``open door to
kitchen``), and the simulator's answer is the next user message. The score is the simulator's (0-100, scaled to
0-1); ``close()`` shuts the JVM down.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from evolvekit.config import EnvConfig
from evolvekit.env import cancel
from evolvekit.env.base import Action, EnvInfo, EnvProfile, EvalResult, ResetResult, StepResult
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.errors import EnvError
from evolvekit.types import Task, TaskSource, Trajectory

SYSTEM = """You are an agent in ScienceWorld, a text-based science simulator. Answer with exactly one action per
message and nothing else, for example: look around / open door to kitchen / go to kitchen / pick up thermometer /
focus on substance in metal pot. The simulator answers with what happened. Action templates (OBJ is an object you
can see):
{actions}"""


def scienceworld_available() -> str | None:
    """None when usable, else the reason it is not."""
    try:
        import scienceworld  # noqa: F401
    except ImportError:
        return "the 'scienceworld' extra is not installed (pip install -c constraints.txt 'evolvekit[scienceworld]')"
    if shutil.which("java") is None:
        return "Java is not on PATH (ScienceWorld runs a JVM)"
    return None


def _kill(sim: Any) -> None:
    proc = sim._gateway.java_process
    if proc.poll() is None:
        proc.kill()


@contextmanager
def _stopped_at_deadline(sim: Any) -> Iterator[None]:
    """Under a request's deadline (env/cancel.py), kill the JVM when the deadline passes inside the block: a call
    into it cannot be interrupted otherwise. The call then fails, and that failure is reported as ``Cancelled``."""
    cancel.on_expiry(lambda: _kill(sim))
    try:
        yield
    except Exception as err:
        if cancel.expired():
            raise cancel.Cancelled("the request's deadline passed; the simulator's JVM was stopped") from err
        raise


def _start_simulator(step_limit: int) -> Any:
    """ScienceWorld's own constructor (``scienceworld.ScienceWorldEnv.__init__``, without its debug mode), in its
    steps, so that under a request's deadline the JVM is killed at the deadline from the moment it has started (it
    prints its port about 0.1 s after its launch; building the simulator inside it takes most of the start)."""
    from py4j.java_gateway import CallbackServerParameters, GatewayParameters, JavaGateway, launch_gateway
    from scienceworld import ScienceWorldEnv as _SW
    from scienceworld.constants import BASEPATH, JAR_PATH

    port, proc = launch_gateway(classpath=JAR_PATH, die_on_exit=True, cwd=BASEPATH, return_proc=True)
    sim = _SW.__new__(_SW)
    try:
        sim._gateway = JavaGateway(
            gateway_parameters=GatewayParameters(auto_field=True, port=port),
            callback_server_parameters=CallbackServerParameters(port=0, daemonize=True),
            java_process=proc,
        )
    except BaseException:
        proc.kill()
        raise
    try:
        with _stopped_at_deadline(sim):
            gateway = sim._gateway
            python_port = gateway.get_callback_server().get_listening_port()
            server = gateway.java_gateway_server
            server.resetCallbackClient(server.getCallbackClient().getAddress(), python_port)
            sim.server = gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
    except BaseException:
        _close(sim)
        raise
    sim.lastStepScore = 0
    sim.taskName = None
    sim.envStepLimit = step_limit
    sim.clear_run_histories()
    sim.goldPathGenerated = False
    sim._obj_tree_tempdir = tempfile.TemporaryDirectory()
    return sim


def _close(sim: Any) -> None:
    try:
        sim.close()
    except Exception:  # noqa: BLE001 - the gateway may already be gone
        pass
    _kill(sim)


class ScienceWorldEnv:
    """Tasks carry ``metadata.task_name`` and ``metadata.variation``; the action is the message text."""

    name = "scienceworld"

    def __init__(self, step_limit: int = 100) -> None:
        reason = scienceworld_available()
        if reason:
            raise EnvError(f"ScienceWorld unavailable: {reason}")
        self._env = _start_simulator(step_limit)
        self.task: Task | None = None
        self.score = 0.0
        self.steps = 0
        self.done = False

    def profile(self) -> list[EnvProfile]:
        names = self._env.get_task_names()
        return [
            EnvProfile(
                env_name=self.name,
                name="ScienceWorld",
                description="Text-based science experiments; task types: " + ", ".join(names),
            )
        ]

    def reset(self, task: Task | None = None, sandbox_config: dict[str, Any] | None = None) -> ResetResult:
        meta = (task.metadata if task else sandbox_config) or {}
        where = "task.metadata" if task else "sandbox_config"
        if not isinstance(meta, dict):
            raise EnvError(f"{where}: must be an object with task_name and variation")
        names = self._env.get_task_names()
        task_name = meta.get("task_name") or names[0]
        if not isinstance(task_name, str) or task_name not in names:
            raise EnvError(
                f"{where}.task_name: {str(task_name)[:60]!r} is not a ScienceWorld task ({len(names)} exist)"
            )
        variation = meta.get("variation", 0)
        if isinstance(variation, bool) or not isinstance(variation, int) or not 0 <= variation < 10_000:
            raise EnvError(f"{where}.variation: must be an integer from 0, got {str(variation)[:30]!r}")
        with _stopped_at_deadline(self._env):
            self._env.load(task_name, variation, "", generateGoldPath=False)
            obs, info = self._env.reset()
        self.task, self.score, self.steps, self.done = task, 0.0, 0, False
        system = SYSTEM.format(actions="\n".join(self._env.get_possible_actions()))
        return ResetResult(
            observation=f"{self._env.get_task_description()}\n{obs}", tools=[], num_turns=1, system=system
        )

    def step(self, action: Action) -> StepResult:
        self.steps += 1
        text = action.text.strip().splitlines()[0].strip() if action.text.strip() else ""
        obs, reward, done, info = self._env.step(text or "look around")
        self.score = max(0.0, float(info.get("score", 0))) / 100.0
        self.done = bool(done)
        # the simulator's answer is the next user message of the conversation
        return StepResult(observation=obs, reward=float(reward), done=self.done, new_turn=True)

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        return EvalResult(score=self.score, passed=self.score >= 1.0, details={"steps": self.steps})

    def info(self) -> EnvInfo:
        return EnvInfo(
            env_name=self.name, task_id=self.task.task_id if self.task else None, steps=self.steps, done=self.done
        )

    def close(self) -> None:
        """Shut the simulator's JVM down (it holds ~180 MB)."""
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            _close(env)

    def variations(self, task_name: str) -> dict[str, list[int]]:
        """ScienceWorld's own train/dev/test variations of one task type."""
        self._env.load(task_name, 0, "", generateGoldPath=False)
        return {
            "train": list(self._env.get_variations_train()),
            "dev": list(self._env.get_variations_dev()),
            "test": list(self._env.get_variations_test()),
        }


@register_env(
    "scienceworld",
    "ScienceWorld text simulator (optional extra 'scienceworld', needs Java)",
    action_stop=("\n",),
    action_max_tokens=32,
)  # an action is the message's first line (`focus on red paint`: a few tokens): generation ends at the newline
def _make(cfg: EnvConfig) -> ScienceWorldEnv:
    return ScienceWorldEnv()


_SPLITS: dict[str, list[tuple[str, int]]] = {}


@register_task_source("scienceworld")
def scienceworld_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """Task types × the split's variations, interleaved across types (the simulator's own split)."""
    if split not in ("train", "dev", "test"):
        raise EnvError(f"ScienceWorld has splits train, dev and test, not '{split}'")
    if split not in _SPLITS:
        env = ScienceWorldEnv()
        try:
            per_type = {name: env.variations(name)[split] for name in env._env.get_task_names()}
        finally:
            env.close()
        rows: list[tuple[str, int]] = []
        for k in range(max(len(v) for v in per_type.values())):
            rows += [(name, v[k]) for name, v in per_type.items() if k < len(v)]
        _SPLITS[split] = rows
    return [
        Task(
            task_id=f"scienceworld-{name}-{var}",
            env_name="scienceworld",
            query=f"ScienceWorld task '{name}', variation {var}",
            source=TaskSource.REAL,
            metadata={"task_name": name, "variation": var, "split": split},
        )
        for name, var in _SPLITS[split][: cfg.family_tasks]
    ]
