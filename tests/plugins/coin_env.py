"""A test-only environment plugin (env.plugins: [coin_env]): one step per episode, a reward that varies.

The reward is 1 when the policy's answer has an even number of characters — meaningless, but it differs between
samples of a random tiny model, so GRPO groups have non-zero advantages and the smoke tests see parameters move.
``COIN_ENV_SLEEP`` slows each step (seconds) so a test can kill a run mid-iteration.
"""

from __future__ import annotations

import os
import time

from evolvekit.config import EnvConfig
from evolvekit.env.base import Action, EnvInfo, EvalResult, ResetResult, StepResult
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.types import Task, Trajectory


class CoinEnv:
    name = "coin"

    def __init__(self) -> None:
        self.task = None
        self.last = ""
        self.done = False

    def profile(self):
        return []

    def reset(self, task=None, sandbox_config=None) -> ResetResult:
        self.task, self.last, self.done = task, "", False
        return ResetResult(observation=task.turns[0] if task else "sandbox", tools=[])

    def step(self, action: Action) -> StepResult:
        time.sleep(float(os.environ.get("COIN_ENV_SLEEP", "0")))
        self.last, self.done = action.text, True
        return StepResult(observation="ok", done=True)

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        score = 1.0 if len(self.last) % 2 == 0 else 0.0
        return EvalResult(score=score, passed=score == 1.0)

    def info(self) -> EnvInfo:
        return EnvInfo(env_name="coin", instance_id="coin", task_id=self.task.task_id if self.task else None)

    def close(self) -> None:
        pass


@register_env("coin", "test double: one step, reward by answer length parity")
def _make(cfg: EnvConfig) -> CoinEnv:
    return CoinEnv()


@register_task_source("coin")
def _tasks(cfg: EnvConfig, split: str) -> list[Task]:
    return [Task(task_id=f"coin-{split}-{i}", env_name="coin", query=f"Say something ({split} {i}).") for i in range(6)]


class CrashingCoinEnv(CoinEnv):
    """Dies like an out-of-memory kill on its first step: the process exits without cleanup."""

    def step(self, action: Action) -> StepResult:
        os._exit(3)


@register_env("coin_crash", "test double: the process dies on the first step")
def _make_crash(cfg: EnvConfig) -> CrashingCoinEnv:
    return CrashingCoinEnv()


@register_task_source("coin_crash")
def _crash_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    return _tasks(cfg, split)
