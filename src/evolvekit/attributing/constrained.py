"""Constrained attribution for local models: the answer's structure is forced, only the labels are chosen.

A 135M attributor cannot follow the paper's answer format (every free answer of the embedded model was
unparseable, so every trajectory's attribution channel was neutralised). With an in-process model the same
prompt (§5.1: task, numbered steps, overall score) is continued with ``Step i Judgment:`` forced for every step,
and the model only chooses between `` GOOD`` and `` BAD`` by their (full, multi-token) log-probabilities — greedy
at temperature 0, else sampled from the two-way softmax. One pass per trajectory, never unparseable. The
per-step "Analysis" of the free format is skipped (documented trade-off: the judgment is the model's, its
reasoning is not written out).
"""

from __future__ import annotations

import math
import random
from typing import Sequence

import torch
from transformers import DynamicCache

from evolvekit.types import ChatMessage, StepLabel

LABELS = (StepLabel.GOOD, StepLabel.BAD)


def choose(logps: Sequence[float], temperature: float, rng: random.Random) -> int:
    """Index of the chosen label: argmax at T = 0, else a draw from softmax(logps / T)."""
    if temperature <= 0:
        return max(range(len(logps)), key=lambda i: logps[i])
    m = max(logps)
    w = [math.exp((lp - m) / temperature) for lp in logps]
    return rng.choices(range(len(w)), weights=w)[0]


class ConstrainedLabeler:
    """Labels every step of one conversation's trajectory with the local model's forced-choice judgments."""

    def __init__(self, llm, temperature: float = 0.0, seed: int = 0) -> None:
        self.llm, self.temperature, self.rng = llm, temperature, random.Random(seed)
        self.label_ids = [llm.encode(" " + lab.value) for lab in LABELS]
        if len({ids[0] for ids in self.label_ids}) < len(LABELS):
            raise ValueError("the label words must start with different tokens")

    @torch.no_grad()
    def _feed(self, cache, ids: list[int]) -> torch.Tensor:
        t = torch.tensor([ids], dtype=torch.long, device=self.llm.device)
        out = self.llm.model(input_ids=t, past_key_values=cache, use_cache=True)
        return torch.log_softmax(out.logits[0].float(), dim=-1)  # [len(ids), V]

    def label(self, conversation: Sequence[ChatMessage], num_steps: int) -> tuple[list[StepLabel], int, int]:
        """(labels, prompt tokens, generated tokens) for ``num_steps`` steps."""
        cache = DynamicCache()
        prompt = self.llm.apply_chat_template(conversation)
        feed, fed, generated, labels = list(prompt), 0, 0, []
        for i in range(num_steps):
            feed += self.llm.encode(("\n" if i else "") + f"Step {i} Judgment:")
            lp = self._feed(cache, feed)[-1]
            fed += len(feed)
            base = cache.get_seq_length()
            scores = []
            for ids in self.label_ids:
                s = float(lp[ids[0]])
                if len(ids) > 1:  # the rest of a multi-token label, then roll the cache back
                    rest = self._feed(cache, ids[:-1])
                    s += sum(float(rest[j, ids[j + 1]]) for j in range(len(ids) - 1))
                    cache.crop(-(cache.get_seq_length() - base))
                scores.append(s)
            pick = choose(scores, self.temperature, self.rng)
            labels.append(LABELS[pick])
            feed = list(self.label_ids[pick])
            generated += len(feed)
        return labels, fed, generated
