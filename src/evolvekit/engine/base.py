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

import asyncio
import threading
import weakref
from dataclasses import asdict, dataclass
from typing import Any, Callable, Hashable, Protocol, Sequence, TypeVar, cast, runtime_checkable

import torch

from evolvekit.engine.sessions import LockStepSessions
from evolvekit.llm.base import LLM, Completion, SamplingParams
from evolvekit.types import ChatMessage

Prompt = Sequence[int] | Sequence[ChatMessage]
_T = TypeVar("_T")


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
    def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]: ...

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


class ConstrainedDecode:
    """Rows decoded under per-row constraints (``llm/constrain.py``: a ``TokenTrie`` or a schema/number constraint
    their first tokens must follow) in one continuous batch of an in-process engine (``Engine.constrained``).

    ``add`` takes ``(key, prompt ids)`` rows, each with its text prefix (the start of the reply its prompt already
    holds) and its constraint; ``run`` decodes until every row finished. With ``keep_rows`` a key that comes back
    with a longer prompt reuses its KV (an exploration's next step). ``use(params)`` sets the sampling of the next
    rows: seeded params give one random stream for all of them, from that seed."""

    def __init__(self, batch: Any, params: SamplingParams) -> None:
        self._batch = batch
        self.use(params)

    def use(self, params: SamplingParams) -> None:
        self._batch.params = params
        if params.seed is not None:
            self._batch.generator = torch.Generator(device="cpu").manual_seed(params.seed)

    def add(
        self,
        items: Sequence[tuple[Hashable, Sequence[int]]],
        text_prefixes: Sequence[str] | None = None,
        constraints: Sequence[Any] | None = None,
    ) -> None:
        self._batch.add(items, text_prefixes=text_prefixes, constraints=constraints)

    def run(self) -> dict[Hashable, Completion]:
        done: dict[Hashable, Completion] = self._batch.run()
        return done


_MODEL_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_MODEL_LOCKS_GUARD = threading.Lock()


def _model_lock(llm: Any) -> threading.Lock:
    """The one lock of an in-process backend, shared by every ``Engine`` over it."""
    with _MODEL_LOCKS_GUARD:
        return _MODEL_LOCKS.setdefault(llm, threading.Lock())


class Engine:
    """One backend behind the seam. ``caps`` is fixed at construction; every method answers from it."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.caps = Capabilities.of(llm)
        # an in-process model's async calls run one at a time, whichever Engine over it makes them
        self._in_process = _model_lock(llm) if self.caps.in_process else None
        self.name = llm.name if isinstance(llm, LLM) else type(llm).__name__

    def __repr__(self) -> str:
        return f"Engine({self.name}: {self.caps.describe()})"

    @property
    def model(self) -> Any:
        """The in-process model (the trained policy), or None for an engine that holds none."""
        return self.llm.model if self.caps.in_process else None

    def chat(self, convs: Sequence[Sequence[ChatMessage]], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions of each conversation, as text (every backend)."""
        out: list[list[Completion]] = self.llm.chat(convs, params)
        return out

    def _require_constrained(self) -> None:
        if not self.caps.constrained:
            raise TypeError(f"{self!r} cannot constrain its decoding (an in-process engine can)")

    def encode(self, text: str) -> list[int]:
        """``text``'s token ids, with no special tokens (a token-ids or constrained engine: a reply's start appended
        to a prompt, the strings a constraint's tries are built from)."""
        if not (self.caps.token_ids or self.caps.constrained):
            raise TypeError(f"{self!r} takes no token ids")
        ids: list[int] = self.llm.encode(text)
        return ids

    @property
    def vocabulary(self) -> tuple[Any, Sequence[int]]:
        """The tokenizer and the end-of-sequence ids that constraints are built over (a constrained engine)."""
        self._require_constrained()
        return self.llm.tokenizer, self.llm.eos_ids

    def constrained(self, params: SamplingParams, keep_rows: bool = False) -> ConstrainedDecode:
        """A continuous batch whose rows decode under their own constraints (forced structure, constrained choice);
        a constrained engine only."""
        self._require_constrained()
        return ConstrainedDecode(self.llm.decode_batch(params, keep_rows=keep_rows), params)

    def apply_chat_template(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The prompt's token ids (a token-ids or constrained engine: it samples from exactly these ids)."""
        if not (self.caps.token_ids or self.caps.constrained):
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

    # -- async (SkyRL's engine interface: generation, weight updates and the prefix-cache reset as coroutines) ------
    async def agenerate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions of each prompt, awaited: token ids on a token-ids engine (exact ids and log-probs
        back), chat messages on any other. The backend's blocking call runs on a worker thread, so the event loop
        that awaits it (a server, an actor) keeps serving. Calls awaited together run concurrently on a served
        backend; an in-process model runs one at a time (its forward switches the model's attention, which two
        threads at once would leave switched)."""
        if self.caps.token_ids:
            return await self._off_loop(self.generate_ids, cast(Sequence[Sequence[int]], prompts), params)
        return await self._off_loop(self.chat, cast(Sequence[Sequence[ChatMessage]], prompts), params)

    async def aupdate_weights(self, state_dict: dict[str, Any]) -> None:
        """``update_weights`` (new weights by parameter name), awaited."""
        await self._off_loop(self.update_weights, state_dict)

    async def areset_prefix_cache(self) -> None:
        """``reset_prefix_cache``, awaited."""
        await self._off_loop(self.reset_prefix_cache)

    async def _off_loop(self, fn: Callable[..., _T], *args: Any) -> _T:
        lock = self._in_process
        if lock is None:
            return await asyncio.to_thread(fn, *args)

        def one_at_a_time() -> _T:
            with lock:
                return fn(*args)

        return await asyncio.to_thread(one_at_a_time)

    def reset_prefix_cache(self) -> None:
        """After new weights: drop cached prefix KV (a no-op for an engine without a prefix cache)."""
        if self.caps.prefix_cache:
            self.llm.reset_prefix_cache()

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        if not self.caps.weight_updates:
            raise TypeError(f"{self!r} accepts no weight updates")
        self.llm.update_weights(state_dict)
