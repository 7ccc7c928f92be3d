"""LLM layer: one protocol, a local transformers backend and an OpenAI-compatible backend."""

from evolvekit.llm.base import LLM, Completion, SamplingParams

__all__ = ["LLM", "Completion", "SamplingParams"]
