"""The LLM protocol: chat messages in; text, token ids and per-token logprobs out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Sequence, runtime_checkable

from evolvekit.types import ChatMessage


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings for one generate call. ``temperature == 0`` means greedy."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stop_on_balanced_json: bool = False  # local backend: a bare JSON action ends at its closing bracket

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("SamplingParams.n must be >= 1")
        if self.temperature < 0:
            raise ValueError("SamplingParams.temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("SamplingParams.top_p must be in (0, 1]")
        if self.max_new_tokens < 1:
            raise ValueError("SamplingParams.max_new_tokens must be >= 1")


RETRY_TEMPERATURE = 0.7


def offset_seed(seed: int | None, offset: int) -> int | None:
    """``seed + offset`` for seeded sampling; an unseeded call (None) stays unseeded. Backends that sample each prompt
    of a call as a request of its own (vLLM, SGLang, an OpenAI-compatible server) seed prompt ``i`` with
    ``offset_seed(seed, i)``: one seed for every request would sample equal prompts alike (a GRPO group's rollouts,
    which the lock-step sessions send in one call)."""
    return None if seed is None else seed + offset


def retry_params(params: SamplingParams, attempt: int) -> SamplingParams:
    """Sampling for attempt ``attempt`` (0 = first) of a call whose answer could not be parsed.

    A greedy (temperature 0) retry would repeat the same unparseable answer, so retries of a greedy call sample at
    ``RETRY_TEMPERATURE``; a sampled call keeps its own temperature.
    """
    if attempt == 0 or params.temperature > 0:
        return params
    return replace(params, temperature=RETRY_TEMPERATURE, seed=offset_seed(params.seed, attempt))


@dataclass
class Completion:
    """One sampled completion.

    ``token_ids`` are the generated tokens (including a final EOS or the token that completed a stop string);
    ``text`` is their decoding with the stop string and EOS removed; ``logprobs`` are the per-token log
    probabilities of ``token_ids`` under the model at temperature 1 (empty when a server returns none).
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_token_ids: list[int] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" (EOS or stop string) or "length"
    # token counts a server reported (OpenAI ``usage``) when it returned no token ids; 0 = not reported
    usage_prompt_tokens: int = 0
    usage_completion_tokens: int = 0

    @property
    def num_prompt_tokens(self) -> int:
        """Prompt tokens: the exact ids where known, else the server's reported count."""
        return len(self.prompt_token_ids) or self.usage_prompt_tokens

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) or self.usage_completion_tokens


@runtime_checkable
class LLM(Protocol):
    """What every backend offers."""

    name: str

    def chat(self, conversations: Sequence[Sequence[ChatMessage]], params: SamplingParams) -> list[list[Completion]]:
        """Generate ``params.n`` completions for each conversation (result[i][j] = sample j of conversation i)."""
        ...


@runtime_checkable
class TokenLLM(LLM, Protocol):
    """A backend that also works on token ids (what rollouts need to keep exact tokens)."""

    def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]: ...

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...


@runtime_checkable
class RolloutEngine(TokenLLM, Protocol):
    """The policy's inference engine, the seam rollouts and evaluation generate through: token ids in, token ids
    with per-token log-probabilities out (``generate_ids``), new weights after each update (``update_weights``;
    in-process engines share the trained model and need none), and ``reset_prefix_cache`` once weights changed.
    Backends: ``llm/local.py`` (native), ``llm/continuous.py`` (transformers' continuous batching)."""

    def update_weights(self, state_dict: dict[str, Any]) -> None: ...

    def reset_prefix_cache(self) -> None: ...


@runtime_checkable
class InProcessLLM(TokenLLM, Protocol):
    """An in-process model (``llm/local.py``): its weights and tokenizer are at hand, so helpers can force an
    answer's structure and read log-probabilities (``llm/choice.py``), and the trainer can update it."""

    model: Any
    device: Any
    tokenizer: Any
    eos_ids: Any

    def encode(self, text: str) -> list[int]: ...

    def decode_batch(self, params: SamplingParams, keep_rows: bool = False) -> Any: ...

    def reset_prefix_cache(self) -> None: ...
