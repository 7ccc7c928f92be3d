"""A running SGLang server that loads the trained weights after every update from a folder it can read
(``llm/sglang_engine.py``)."""

from __future__ import annotations

from evolvekit.config import PolicyModelConfig
from evolvekit.engine.spec import EngineBackend, EngineRequest
from evolvekit.llm.base import RolloutEngine


def problem(settings: PolicyModelConfig) -> str | None:
    if not settings.engine_url or not settings.engine_weights_dir:
        missing = "models.policy.engine_url" if not settings.engine_url else "models.policy.engine_weights_dir"
        return f"models.policy.engine: sglang needs {missing} (the server's URL, and a folder it can read)"
    if not settings.engine_url.startswith(("http://", "https://")):
        return "models.policy.engine_url: must start with http:// or https://"
    return None


def build(request: EngineRequest) -> RolloutEngine:
    from evolvekit.llm.sglang_engine import SGLangEngine

    s = request.settings
    assert s.engine_url and s.engine_weights_dir  # problem() above (run and config validate say so first)
    return SGLangEngine(request.policy, s.engine_url, s.engine_weights_dir, timeout_s=s.timeout_s)


BACKEND = EngineBackend(
    name="sglang",
    summary="a running SGLang server (engine_url) that loads the trained weights after every update",
    build=build,
    devices=("cpu", "cuda", "mps"),  # the trainer's device; the server has its own
    settings=("engine_url", "engine_weights_dir", "timeout_s"),
    holds_weights=True,
    problem=problem,
)
