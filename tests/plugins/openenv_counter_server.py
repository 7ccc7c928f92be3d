"""An OpenEnv environment served by openenv-core's own server (``create_app``), for tests/cpu/test_openenv.py.

It runs in the separate virtual environment scripts/setup.sh makes for openenv-core (``.venv/openenv-server``;
openenv-core's gradio cannot share evolvekit's pins):

    .venv/openenv-server/bin/python tests/plugins/openenv_counter_server.py PORT

The episode: ``reset(seed)`` draws a target in 2..9 from the seed; the action ``{"n": int}`` adds ``n`` to a counter
that starts at 0; reaching the target ends the episode with reward 1.0, passing it ends it with reward 0.0.
"""

from __future__ import annotations

import random
import sys
from typing import Any
from uuid import uuid4

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field


class CounterAction(Action):
    n: int = Field(..., description="the amount to add to the counter")


class CounterObservation(Observation):
    counter: int = Field(0, description="the counter's value")
    target: int = Field(0, description="the value to reach")
    message: str = ""


class CounterEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.episode, self.steps, self.counter, self.target = str(uuid4()), 0, 0, 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        self.episode, self.steps, self.counter = episode_id or str(uuid4()), 0, 0
        self.target = random.Random(seed).randint(2, 9)
        return CounterObservation(
            counter=0, target=self.target, message=f"Bring the counter from 0 to {self.target}.", reward=0.0
        )

    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:  # type: ignore[override]
        self.steps += 1
        self.counter += action.n
        hit, over = self.counter == self.target, self.counter > self.target
        message = "Target reached." if hit else ("Overshot." if over else f"{self.target - self.counter} to go.")
        return CounterObservation(
            counter=self.counter, target=self.target, message=message, done=hit or over, reward=float(hit)
        )

    @property
    def state(self) -> State:
        return State(episode_id=self.episode, step_count=self.steps, counter=self.counter, target=self.target)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="counter", description="A counter to bring to a target value.")


app = create_app(CounterEnvironment, CounterAction, CounterObservation, env_name="counter", max_concurrent_envs=8)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
