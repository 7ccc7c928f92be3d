"""transformers' continuous batching (``generate_batch``, paged attention) over the trained policy."""

from __future__ import annotations

from evolvekit.engine.spec import EngineBackend, EngineRequest
from evolvekit.llm.base import RolloutEngine


def build(request: EngineRequest) -> RolloutEngine:
    from evolvekit.llm.continuous import ContinuousBatchingLLM

    return ContinuousBatchingLLM(request.policy)


BACKEND = EngineBackend(
    name="continuous_batching",
    summary="transformers' generate_batch with paged attention (llm/continuous.py)",
    build=build,
    devices=("cpu", "cuda"),
)
