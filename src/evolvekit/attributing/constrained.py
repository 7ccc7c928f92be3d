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

import random
from typing import Sequence

from evolvekit.llm.choice import ChoiceScorer, choose
from evolvekit.types import ChatMessage, StepLabel

LABELS = (StepLabel.GOOD, StepLabel.BAD)


class ConstrainedLabeler:
    """Labels every step of one conversation's trajectory with the local model's forced-choice judgments."""

    def __init__(self, llm, temperature: float = 0.0, seed: int = 0) -> None:
        self.llm, self.temperature, self.rng = llm, temperature, random.Random(seed)
        self.scorer = ChoiceScorer(llm)
        self.label_ids = [llm.encode(" " + lab.value) for lab in LABELS]

    def label(self, conversation: Sequence[ChatMessage], num_steps: int) -> tuple[list[StepLabel], int, int]:
        """(labels, prompt tokens, generated tokens) for ``num_steps`` steps."""
        cache = self.scorer.new_cache()
        prompt = self.llm.apply_chat_template(conversation)
        feed, fed, generated, labels = list(prompt), 0, 0, []
        for i in range(num_steps):
            feed += self.llm.encode(("\n" if i else "") + f"Step {i} Judgment:")
            lp = self.scorer.feed(cache, feed)[-1]
            fed += len(feed)
            scores = self.scorer.score(cache, lp, self.label_ids)
            pick = choose(scores, self.temperature, self.rng)
            labels.append(LABELS[pick])
            feed = list(self.label_ids[pick])
            generated += len(feed)
        return labels, fed, generated
