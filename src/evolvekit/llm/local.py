"""Local transformers backend: batched sampling with a KV cache, exact token ids and logprobs.

Generation is a hand-written decode loop rather than ``model.generate``: it is faster on CPU (measured
15-17 vs 8-10 tok/s for one sequence), it drops finished rows from the batch so a sample that stops early no
longer costs decode time, and it returns the exact token ids and their logprobs that training needs.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from evolvekit.errors import LLMError
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.llm.embedded import resolve_model_path
from evolvekit.llm.packed import pack_linears
from evolvekit.llm.sampling import common_prefix_len, inverse_cdf_sample, sample_next  # noqa: F401  (re-exported: their old home)
from evolvekit.resolve import device_for, dtype_for
from evolvekit.types import ChatMessage

log = logging.getLogger(__name__)


def pick_device(device: str) -> torch.device:
    return torch.device(device_for(device, torch.cuda.is_available()))


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    chosen = dtype_for(dtype, str(device))
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[chosen]


class LocalLLM:
    """A causal LM served in-process. ``model`` may be 'embedded:...', a local folder, or an already built model."""

    def __init__(
        self,
        model: str = "embedded:smollm2-135m-instruct",
        device: str = "auto",
        dtype: str = "auto",
        tokenizer=None,
        hf_model=None,
        packed_weights: bool = True,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = model if isinstance(model, str) else "custom"
        self.prefix_cache_min_tokens = 32  # shared prefixes shorter than this are not worth a separate prefill
        self._kv_entry: tuple | None = None  # (prefix token ids, KV cache) kept across calls
        self._last_row: tuple[int, ...] | None = None  # the previous call's last row (automatic prefix caching)
        self.prefix_cache_hits = 0
        self.device = pick_device(device)
        if hf_model is not None:
            self.model = hf_model
            self.tokenizer = tokenizer
        else:
            path = resolve_model_path(model)
            folder = Path(path)
            if (
                folder.is_dir()
                and not (folder / "config.json").is_file()
                and not (folder / "adapter_config.json").is_file()
            ):
                raise LLMError(f"'{model}' is not a model folder (no config.json or adapter_config.json)")
            if not folder.exists() and (path.startswith((".", "/", "~")) or path.count("/") != 1):
                raise LLMError(f"no such model folder: '{model}'")
            t0 = time.perf_counter()
            try:
                self.tokenizer = AutoTokenizer.from_pretrained(path)
                if (Path(path) / "adapter_config.json").is_file():  # a LoRA checkpoint written by the trainer
                    from peft import AutoPeftModelForCausalLM

                    self.model = AutoPeftModelForCausalLM.from_pretrained(
                        path, dtype=pick_dtype(dtype, self.device), is_trainable=True
                    )
                else:
                    self.model = AutoModelForCausalLM.from_pretrained(path, dtype=pick_dtype(dtype, self.device))
            except (
                OSError,
                ValueError,
                KeyError,
                TypeError,
            ) as err:  # transformers' many ways of saying "no model here"
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise LLMError(f"cannot load local model '{model}' (models.*.model): {first[:200]}") from None
            log.info("loaded %s in %.1fs", model, time.perf_counter() - t0)
        self.model.to(self.device)
        self.model.eval()
        if packed_weights:  # CPU inference through oneDNN-packed linear weights (llm/packed.py); training unaffected
            n = pack_linears(self.model)
            if n:
                log.info("%d linear layers packed for CPU inference", n)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = {self.tokenizer.eos_token_id}
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            self.eos_ids.add(gen_eos)
        elif isinstance(gen_eos, list):
            self.eos_ids.update(gen_eos)
        self.eos_ids.discard(None)

    # -- token level -------------------------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]:
        enc = self.tokenizer.apply_chat_template(
            [m.model_dump(exclude_none=True) for m in messages],
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            return_dict=True,
        )
        return list(enc["input_ids"])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def chat(self, conversations: Sequence[Sequence[ChatMessage]], params: SamplingParams) -> list[list[Completion]]:
        return self.generate_ids([self.apply_chat_template(c) for c in conversations], params)

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Sample ``params.n`` completions for each prompt in one batch (rows leave it as they finish)."""
        from evolvekit.llm.batcher import DecodeBatch

        if not prompts:
            return []
        batch = DecodeBatch(self, params)
        batch.add([((i, s), p) for i, p in enumerate(prompts) for s in range(params.n)])
        done = batch.run()
        return [[done[(i, s)] for s in range(params.n)] for i in range(len(prompts))]

    def decode_batch(self, params: SamplingParams, keep_rows: bool = False):
        """A continuous batch (``llm.batcher.DecodeBatch``): add rows at any time, ``step()`` until empty."""
        from evolvekit.llm.batcher import DecodeBatch

        return DecodeBatch(self, params, keep_rows=keep_rows)

    def shared_prefix_len(self, rows: Sequence[Sequence[int]]) -> int:
        """How many leading tokens of ``rows`` come from one reusable KV prefix (0: prefill everything).

        Rollouts of one batch share the system prompt, tool list and worked examples: with several rows their
        common prefix is prefilled once (and kept for later calls); a row that starts with the kept prefix
        reuses it. A single row with no matching kept prefix shares its prefix with the previous call's row
        instead (automatic prefix caching, so one-at-a-time callers get the reuse too). Every row keeps at least
        one token of its own.
        """
        own = min(len(r) for r in rows) - 1
        if len(rows) > 1:
            common = min(common_prefix_len(rows), own)
        elif self._last_row is not None:
            common = min(common_prefix_len([rows[0], self._last_row]), own)
        else:
            common = 0
        self._last_row = tuple(rows[-1])
        if self._kv_entry is not None:  # the kept prefix wins unless several rows share much more than it
            n = len(self._kv_entry[0])
            if (
                n <= own
                and (len(rows) == 1 or common < n + self.prefix_cache_min_tokens)
                and all(tuple(r[:n]) == self._kv_entry[0] for r in rows)
            ):
                return n
        return common if common >= self.prefix_cache_min_tokens else 0

    def prefix_kv(self, prefix: tuple[int, ...]):
        """KV cache of a shared prefix, reused across calls (turns) while the weights are unchanged.

        Rollouts share the system prompt, tools and worked examples; the cache of that prefix is computed once and
        kept (one entry) as plain per-layer (keys, values) tensors that callers only read. ``reset_prefix_cache()`` —
        called by the trainer after every update — drops it.
        """
        from evolvekit.llm.ragged import KVSlots, ragged_forward

        if self._kv_entry is None or self._kv_entry[0] != prefix:
            slots = KVSlots(spare=0)
            slots.append()
            ragged_forward(self.model, slots, [list(prefix)])
            self._kv_entry = (prefix, slots.extract(0).own)  # read-only: rows share it (KVSlots.append_shared)
        else:
            self.prefix_cache_hits += 1
        return self._kv_entry[1]

    def reset_prefix_cache(self) -> None:
        """Drop the cached prefix KV (it belongs to the weights it was computed with)."""
        self._kv_entry = None
        self._last_row = None

    def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy new weights into the model in place (cast to its dtype; packed copies follow, llm/packed.py)."""
        with torch.no_grad():
            own = self.model.state_dict()
            for name, value in state_dict.items():
                own[name].copy_(value.to(device=own[name].device, dtype=own[name].dtype))
        self.reset_prefix_cache()

    def stop_hit(self, tokens: list[int], stops: tuple[str, ...]) -> int | None:
        tail = self.tokenizer.decode(tokens[-16:], skip_special_tokens=True)
        for s in stops:
            if s in tail:
                return 1
        return None


class OverLocal:
    """The text side of an engine that generates elsewhere but tokenizes as ``local`` does (continuous batching,
    vLLM): chat template, encode, decode, and chat through the subclass's ``generate_ids``."""

    local: LocalLLM

    def apply_chat_template(self, messages: Sequence[ChatMessage], add_generation_prompt: bool = True) -> list[int]:
        return self.local.apply_chat_template(messages, add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        return self.local.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.local.decode(token_ids)

    generate_ids: Callable[[Sequence[Sequence[int]], SamplingParams], list[list[Completion]]]  # the subclass's engine

    def chat(self, conversations: Sequence[Sequence[ChatMessage]], params: SamplingParams) -> list[list[Completion]]:
        return self.generate_ids([self.apply_chat_template(c) for c in conversations], params)
