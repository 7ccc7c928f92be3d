"""A test-only plugin module (env.plugins: [pinned_engine]) that registers a rollout engine with settings of its own:
``pinned`` samples through the trained policy itself, at a temperature its options pin (``engine_options``), so a
test can see the engine, its device rule and its options used."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from evolvekit.engine.registry import register_engine
from evolvekit.engine.spec import EngineBackend, EngineRequest
from evolvekit.llm.base import RolloutEngine

BUILT: list[EngineRequest] = []


class PinnedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.0, ge=0)
    label: str = "pinned"
    limits: dict[str, int] = Field(default_factory=dict)  # a nested option: an error names its whole path


def build(request: EngineRequest) -> RolloutEngine:
    BUILT.append(request)
    return request.policy


register_engine(
    EngineBackend(
        name="pinned", summary="the policy itself, for tests", build=build, devices=("cpu",), options=PinnedOptions
    )
)
