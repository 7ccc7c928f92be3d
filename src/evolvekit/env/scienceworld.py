"""ScienceWorld (optional extra ``scienceworld``; needs Java): text actions scored by the simulator."""

from __future__ import annotations

import shutil
from typing import Any

from evolvekit.config import EnvConfig
from evolvekit.env.base import Action, EnvInfo, EnvProfile, EvalResult, ResetResult, StepResult
from evolvekit.env.registry import register_env
from evolvekit.errors import EnvError
from evolvekit.types import Task, Trajectory


def scienceworld_available() -> str | None:
    """None when usable, else the reason it is not."""
    try:
        import scienceworld  # noqa: F401
    except ImportError:
        return "the 'scienceworld' extra is not installed (pip install -c constraints.txt 'evolvekit[scienceworld]')"
    if shutil.which("java") is None:
        return "Java is not on PATH (ScienceWorld runs a JVM)"
    return None


class ScienceWorldEnv:
    """Tasks carry ``metadata.task_name`` and ``metadata.variation``; the action is the message text."""

    name = "scienceworld"

    def __init__(self, step_limit: int = 100) -> None:
        reason = scienceworld_available()
        if reason:
            raise EnvError(f"ScienceWorld unavailable: {reason}")
        from scienceworld import ScienceWorldEnv as _SW

        self._env = _SW("", envStepLimit=step_limit)
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
        task_name = meta.get("task_name") or self._env.get_task_names()[0]
        self._env.load(task_name, int(meta.get("variation", 0)), "", generateGoldPath=False)
        obs, info = self._env.reset()
        self.task, self.score, self.steps, self.done = task, 0.0, 0, False
        return ResetResult(observation=f"{self._env.get_task_description()}\n{obs}", tools=[], num_turns=1)

    def step(self, action: Action) -> StepResult:
        self.steps += 1
        obs, reward, done, info = self._env.step(action.text.strip())
        self.score = max(0.0, float(info.get("score", 0))) / 100.0
        self.done = bool(done)
        return StepResult(observation=obs, reward=float(reward), done=self.done)

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        return EvalResult(score=self.score, passed=self.score >= 1.0, details={"steps": self.steps})

    def info(self) -> EnvInfo:
        return EnvInfo(
            env_name=self.name, task_id=self.task.task_id if self.task else None, steps=self.steps, done=self.done
        )

    def close(self) -> None:
        pass


@register_env("scienceworld", "ScienceWorld text simulator (optional extra 'scienceworld', needs Java)")
def _make(cfg: EnvConfig) -> ScienceWorldEnv:
    return ScienceWorldEnv()
