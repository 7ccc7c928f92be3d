"""Forced choice with an in-process model: the answer's structure is fixed, the model only picks among options.

The constrained helpers (attributor labels, judge score levels, yes/no validation, experience fields) continue a
prompt with text we force and let the model choose between a few continuations by their full (multi-token)
log-probabilities: the argmax at temperature 0, else a draw from the softmax at that temperature. A small model
then always answers in the required structure; which answer it gives is still its own.
"""

from __future__ import annotations

import math
import random
from typing import Any, Sequence

import torch
from transformers import DynamicCache


def choose(logps: Sequence[float], temperature: float, rng: random.Random) -> int:
    """Index of the chosen option: argmax at T = 0, else a draw from softmax(logps / T)."""
    if temperature <= 0:
        return max(range(len(logps)), key=lambda i: logps[i])
    m = max(logps)
    w = [math.exp((lp - m) / temperature) for lp in logps]
    return rng.choices(range(len(w)), weights=w)[0]


class ChoiceScorer:
    """Feeds token ids into one KV cache and scores candidate continuations without keeping them."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.priors: dict[tuple[int, ...], list[float]] = {}  # content-free prompt -> option log-probs

    def new_cache(self) -> DynamicCache:
        return DynamicCache()

    @torch.no_grad()
    def feed(self, cache: DynamicCache, ids: Sequence[int]) -> torch.Tensor:
        """Log-probabilities [len(ids), V] after each fed token; the ids stay in the cache."""
        t = torch.tensor([list(ids)], dtype=torch.long, device=self.llm.device)
        out = self.llm.model(input_ids=t, past_key_values=cache, use_cache=True)
        return torch.log_softmax(out.logits[0].float(), dim=-1)

    def score(self, cache: DynamicCache, next_logprobs: torch.Tensor, options: Sequence[Sequence[int]]) -> list[float]:
        """Σ log p of each option's tokens after the cached context (``next_logprobs``: the distribution of the next
        token); the cache is rolled back after each option."""
        base = cache.get_seq_length()
        scores = []
        for ids in options:
            s = float(next_logprobs[ids[0]])
            if len(ids) > 1:
                rest = self.feed(cache, ids[:-1])
                s += sum(float(rest[j, ids[j + 1]]) for j in range(len(ids) - 1))
                cache.crop(-(cache.get_seq_length() - base))
            scores.append(s)
        return scores

    def option_logprobs(self, prompt_ids: Sequence[int], options: Sequence[Sequence[int]]) -> list[float]:
        cache = self.new_cache()
        lp = self.feed(cache, prompt_ids)[-1]
        return self.score(cache, lp, options)

    def pick(
        self,
        prompt_ids: Sequence[int],
        options: Sequence[Sequence[int]],
        temperature: float,
        rng: random.Random,
        prior: Sequence[float] | None = None,
    ) -> tuple[int, list[float]]:
        """One choice after ``prompt_ids``: (chosen index, every option's score). With ``prior`` (the options'
        log-probabilities after a content-free prompt, ``calibrated``) the scores are log p − prior."""
        scores = self.option_logprobs(prompt_ids, options)
        if prior is not None:
            scores = [s - p for s, p in zip(scores, prior)]
        return choose(scores, temperature, rng), scores


def calibrated(scorer: ChoiceScorer, content_free_ids: Sequence[int], options: Sequence[Sequence[int]]) -> list[float]:
    """The options' log-probabilities after a content-free prompt: the model's prior preference for each answer,
    to be subtracted from its log-probabilities on real inputs (contextual calibration; Zhao et al. 2021, "Calibrate
    Before Use"). A small model's forced choice otherwise mostly reflects that prior (measured: the 135M judge gave
    every trajectory the same level; benchmarks/results/helper_health.md)."""
    key = (*content_free_ids, -1, *(t for ids in options for t in (*ids, -1)))
    if key not in scorer.priors:  # the same content-free prompt recurs for every call of a helper: compute it once
        scorer.priors[key] = scorer.option_logprobs(content_free_ids, options)
    return scorer.priors[key]
