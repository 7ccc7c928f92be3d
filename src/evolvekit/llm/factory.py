"""Build the LLM for each role from config; roles with the same local model share one loaded instance."""

from __future__ import annotations

from typing import Any

from evolvekit.config import EmbeddingConfig, ModelConfig, ModelsConfig
from evolvekit.llm.base import LLM, SamplingParams

_LOCAL_CACHE: dict[tuple[str, str, str, bool], LLM] = {}


def build_llm(cfg: ModelConfig, role: str = "policy") -> LLM:
    if cfg.backend == "openai":
        from evolvekit.llm.openai_compat import OpenAICompatLLM

        return OpenAICompatLLM(
            cfg.model,
            base_url=cfg.base_url,
            api_key_env=cfg.api_key_env,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            role=role,
            return_token_ids=cfg.return_token_ids,
            concurrency=cfg.concurrency,
            # a helper's timed-out request is dropped and counted; the policy's ends the job (its samples are data)
            drop_timed_out=role != "policy",
        )
    key = (cfg.model, cfg.device, cfg.dtype, cfg.packed_weights)
    if key not in _LOCAL_CACHE:
        from evolvekit.llm.local import LocalLLM

        _LOCAL_CACHE[key] = LocalLLM(cfg.model, device=cfg.device, dtype=cfg.dtype, packed_weights=cfg.packed_weights)
    return _LOCAL_CACHE[key]


def role_llm(models: ModelsConfig, role: str) -> LLM:
    cfg = getattr(models, role, None)
    if cfg is None:
        raise ValueError(f"unknown LLM role '{role}'")
    return build_llm(cfg, role)


def role_llm_or(models: ModelsConfig, role: str, policy: LLM) -> LLM:
    """``role``'s model, or ``policy`` itself where the role is the same local model as the policy: the weights are
    not loaded a second time (checked before loading anything)."""
    cfg = getattr(models, role, None)
    if cfg is None:
        raise ValueError(f"unknown LLM role '{role}'")
    if cfg.backend == "local" and models.policy.backend == "local" and cfg.model == models.policy.model:
        return policy
    return role_llm(models, role)


def sampling_for(cfg: ModelConfig, **overrides) -> SamplingParams:
    """Default sampling params of a role, with per-call overrides."""
    base: dict[str, Any] = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    base.update(overrides)
    return SamplingParams(**base)


_EMBEDDERS: dict[tuple[str, str, int], Any] = {}


def build_embedder(cfg: EmbeddingConfig):
    """The embedding model of ``cfg``, loaded once per process and shared (the experience pool, synthesis's dedup,
    CoEvolve's dedup and Evolving-RL's related tasks of one run embed with the same model; encoding keeps no state)."""
    from evolvekit.llm.embeddings import SentenceTransformerEmbedder

    key = (cfg.model, cfg.device, cfg.batch_size)
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = SentenceTransformerEmbedder(cfg.model, device=cfg.device, batch_size=cfg.batch_size)
    return _EMBEDDERS[key]
