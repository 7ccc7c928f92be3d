"""The engine: a backend (``llm/``) with its capabilities found once, at build time.

Backends:
- the native CPU engine (``llm/local.py: LocalLLM``): token ids in and out, per-session KV reuse in one continuous
  batch (``decode_batch``), the trained model in process, a prefix cache;
- transformers' continuous batching (``llm/continuous.py``): token ids in and out, weight updates, a prefix cache;
- vLLM in process on the trainer's GPU (``llm/vllm_engine.py``): token ids in and out, its own copy of the weights
  (weight updates, not in process), a prefix cache;
- an OpenAI-compatible server (``llm/openai_compat.py``): chat messages in, text out.

Callers never ask a backend what it can do; they read ``Engine.caps``, which ``Engine(llm)`` fills once from the
protocols below (the same questions the callers used to ask with ``hasattr`` on every call).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Hashable, Protocol, Sequence, runtime_checkable

from evolvekit.engine.sessions import LockStepSessions
from evolvekit.llm.base import LLM, Completion, SamplingParams
from evolvekit.types import ChatMessage

Prompt = Sequence[int] | Sequence[ChatMessage]


@runtime_checkable
class _TokenIds(Protocol):
    def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]: ...

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]: ...


@runtime_checkable
class _SessionBatch(Protocol):
    def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]: ...

    def decode_batch(self, params: SamplingParams, keep_rows: bool = False) -> Any: ...


@runtime_checkable
class _WeightSink(Protocol):
    def update_weights(self, state_dict: dict[str, Any]) -> None: ...


@runtime_checkable
class _PrefixCache(Protocol):
    def reset_prefix_cache(self) -> None: ...


@runtime_checkable
class _InProcess(Protocol):
    model: Any


@runtime_checkable
class _Constrained(Protocol):
    def decode_batch(self, params: SamplingParams, keep_rows: bool = False) -> Any: ...


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, found once (``Capabilities.of``)."""

    token_ids: bool = False  # prompts as token ids; exact sampled ids and log-probs back (``generate_ids``)
    sessions: bool = False  # a continuous batch whose sessions keep their KV between turns (``decode_batch``)
    weight_updates: bool = False  # accepts new weights (``update_weights``)
    prefix_cache: bool = False  # caches prefix KV that new weights make stale (``reset_prefix_cache``)
    in_process: bool = False  # holds the model object itself (the trainer may update it in place)
    constrained: bool = False  # forced structure and constrained choice (``llm/choice.py``, ``llm/constrain.py``)

    @classmethod
    def of(cls, llm: object) -> Capabilities:
        return cls(
            token_ids=isinstance(llm, _TokenIds),
            sessions=isinstance(llm, _SessionBatch),
            weight_updates=isinstance(llm, _WeightSink),
            prefix_cache=isinstance(llm, _PrefixCache),
            in_process=isinstance(llm, _InProcess),
            constrained=isinstance(llm, _Constrained),
        )

    def describe(self) -> str:
        """``token_ids, sessions, …``: the capabilities present, for logs and errors."""
        return ", ".join(n for n, present in asdict(self).items() if present) or "chat only"


class Sessions(Protocol):
    """Concurrent generation sessions (one per episode): ``add`` prompts under keys, ``step`` until it returns
    finished completions, ``forget`` a key whose episode ended. A key that comes back with a longer prompt is the
    same session's next turn (the native engine reuses its KV)."""

    def add(self, items: Sequence[tuple[Hashable, Any]]) -> None: ...

    def step(self) -> list[tuple[Hashable, Completion]]: ...

    def forget(self, key: Hashable) -> None: ...

    def __len__(self) -> int: ...


class Engine:
    """One backend behind the seam. ``caps`` is fixed at construction; every method answers from it."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.caps = Capabilities.of(llm)
        self.name = llm.name if isinstance(llm, LLM) else type(llm).__name__

    def __repr__(self) -> str:
        return f"Engine({self.name}: {self.caps.describe()})"

    @property
    def model(self) -> Any:
        """The in-process model (the trained policy), or None for an engine that holds none."""
        return self.llm.model if self.caps.in_process else None

    def apply_chat_template(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The prompt's token ids (a token-ids engine only: it samples from exactly these ids)."""
        if not self.caps.token_ids:
            raise TypeError(f"{self!r} takes no token ids")
        ids: list[int] = self.llm.apply_chat_template(messages)
        return ids

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions of each prompt, with their exact token ids and log-probs (a token-ids engine
        only: a policy trained on what it sampled needs them)."""
        if not self.caps.token_ids:
            raise TypeError(f"{self!r} takes no token ids")
        out: list[list[Completion]] = self.llm.generate_ids(prompts, params)
        return out

    def sessions(self, params: SamplingParams) -> Sessions:
        """Sessions that decode together: the native engine's continuous batch (each session keeps its KV between
        turns), or, for every other backend, lock-step rounds in which every waiting prompt goes into one call."""
        if self.caps.sessions:
            batch: Sessions = self.llm.decode_batch(params, keep_rows=True)
            return batch
        return LockStepSessions(self.llm, params, token_ids=self.caps.token_ids)

    def reset_prefix_cache(self) -> None:
        """After new weights: drop cached prefix KV (a no-op for an engine without a prefix cache)."""
        if self.caps.prefix_cache:
            self.llm.reset_prefix_cache()

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        if not self.caps.weight_updates:
            raise TypeError(f"{self!r} accepts no weight updates")
        self.llm.update_weights(state_dict)
