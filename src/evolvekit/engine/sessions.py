"""Lock-step sessions: the ``Sessions`` of an engine without a continuous batch (transformers' continuous batching,
an OpenAI-compatible server). Each ``step`` sends every waiting prompt in one call (the server receives them
concurrently) and returns all of them finished."""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from evolvekit.llm.base import Completion, SamplingParams


class LockStepSessions:
    def __init__(self, llm: Any, params: SamplingParams, token_ids: bool) -> None:
        self.llm, self.params, self.token_ids = llm, params, token_ids
        self.pending: dict[Hashable, Any] = {}
        self.calls = 0

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, items: Sequence[tuple[Hashable, Any]]) -> None:
        """``(key, prompt)``: token ids for an engine with ``token_ids``, else the chat messages."""
        for key, prompt in items:
            self.pending[key] = prompt

    def forget(self, key: Hashable) -> None:
        self.pending.pop(key, None)

    def step(self) -> list[tuple[Hashable, Completion]]:
        if not self.pending:
            return []
        keys, prompts = list(self.pending), list(self.pending.values())
        self.pending.clear()
        self.calls += 1
        outs = self.llm.generate_ids(prompts, self.params) if self.token_ids else self.llm.chat(prompts, self.params)
        return [(key, out[0]) for key, out in zip(keys, outs)]
