"""The policy through transformers' own continuous batching (``model.generate_batch``, paged attention).

A second backend of the token-level seam rollouts use (``TokenLLM``: ``apply_chat_template``, ``generate_ids``
returning token ids with their per-token log-probabilities, ``decode``; ``reset_prefix_cache`` after each update),
next to the native CPU engine (``LocalLLM``'s own ``DecodeBatch``). It is meant for GPUs, where transformers'
scheduler and paged KV cache pay off; on CPU it runs (tested for parity) but is slower than the native engine.
The wrapped model object is the trainer's, so an update is visible to the next call without copying weights
(``update_weights`` loads a state dict for callers that train elsewhere). Stop strings are applied to the finished
completion: generation runs to EOS or ``max_new_tokens``, then the completion is cut after the token that
completes the first stop string (the text without it), as the native engine does while decoding.

The paged KV cache is sized from the batch (``paged_cache_blocks``), not from the device's free memory: left to
itself, transformers fills 90% of the free memory with cache, which on CPU is the machine's RAM (14.6 GiB resident
for a two-prompt test on a 24 GiB machine).
"""

from __future__ import annotations

import logging
from math import ceil
from typing import Sequence

import torch

from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.llm.local import LocalLLM, OverLocal

log = logging.getLogger(__name__)


def cut_completion(
    decode, token_ids: list[int], logprobs: list[float], stops: Sequence[str], eos: set[int]
) -> tuple[list[int], list[float], str, str]:
    """(tokens, logprobs, text, finish_reason) of a completion cut after the token that completes its first stop
    string or at its EOS; the text leaves the stop string and EOS out."""
    for k, tok in enumerate(token_ids):
        if tok in eos:
            return token_ids[: k + 1], logprobs[: k + 1], decode(token_ids[:k]), "stop"
        if stops:
            text = decode(token_ids[: k + 1])
            hits = [text.find(s) for s in stops if s in text]
            if hits:
                return token_ids[: k + 1], logprobs[: k + 1], text[: min(hits)], "stop"
    return token_ids, logprobs, decode(token_ids), "length"


def paged_cache_blocks(prompt_lens: Sequence[int], max_new_tokens: int, page_size: int) -> int:
    """Cache blocks of ``page_size`` tokens that hold every row at once: each row's prompt and completion rounded up
    to whole pages, plus one spare block. An upper bound (rows that share a prefix share its blocks)."""
    return sum(ceil((n + max_new_tokens) / page_size) for n in prompt_lens) + 1


class ContinuousBatchingLLM(OverLocal):
    """``TokenLLM`` over ``model.generate_batch`` (transformers' continuous batching)."""

    def __init__(self, local: LocalLLM) -> None:
        self.local = local
        self.name = local.name
        self.tokenizer, self.device, self.eos_ids = local.tokenizer, local.device, local.eos_ids

    @property
    def model(self):
        return self.local.model

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions per prompt, with the log-probabilities transformers reports for each token
        (of the distribution it sampled from: temperature 1 here, as rollouts sample)."""
        from transformers import GenerationConfig
        from transformers.generation import ContinuousBatchingConfig

        if not prompts:
            return []
        rows = [list(p) for p in prompts for _ in range(params.n)]
        greedy = params.temperature == 0
        gen = GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=None,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.tokenizer.pad_token_id,
        )
        if params.seed is not None:
            torch.manual_seed(params.seed)
        cb = ContinuousBatchingConfig(return_logprobs=True)
        cb.num_blocks = paged_cache_blocks([len(r) for r in rows], params.max_new_tokens, cb.page_size)
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate_batch(rows, generation_config=gen, continuous_batching_config=cb, warmup=False)
        finally:
            self.model.train(was_training)
        results = [out[f"req_{i}"] for i in range(len(rows))]
        comps = []
        for row, res in zip(rows, results):
            ids, lps, text, reason = cut_completion(
                self.decode, list(res.generated_tokens), [float(x) for x in res.logprobs], params.stop, self.eos_ids
            )
            comps.append(Completion(text=text, token_ids=ids, logprobs=lps, prompt_token_ids=row, finish_reason=reason))
        return [comps[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load new policy weights (for a trainer in another process; in-process training shares the model)."""
        self.local.update_weights(state_dict)

    def reset_prefix_cache(self) -> None:
        """Nothing of its own is kept between calls (each ``generate_batch`` builds its own paged cache); the wrapped
        policy's prefix cache is dropped (other callers of the policy, synthesis say, read it)."""
        self.local.reset_prefix_cache()
