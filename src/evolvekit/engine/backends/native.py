"""evolvekit's own engine: the trained policy samples its rollouts itself (``llm/local.py``'s continuous batch)."""

from __future__ import annotations

from evolvekit.engine.spec import EngineBackend, EngineRequest
from evolvekit.llm.base import RolloutEngine


def build(request: EngineRequest) -> RolloutEngine:
    return request.policy


BACKEND = EngineBackend(
    name="native",
    summary="evolvekit's own DecodeBatch over the trained policy (fastest on CPU)",
    build=build,
    devices=("cpu", "cuda", "mps"),
)
