"""Constrained decoding of a choice among known strings (e.g. a tool name), for the local backend's decode batch.

A ``TokenTrie`` holds the token sequences of the allowed strings. While a row carries a trie node, its logits are
masked to that node's children before sampling (the model still chooses, with its own probabilities, but only
among the allowed continuations); when the sampled token reaches the end of an allowed sequence the constraint
ends and the row decodes freely. This is grammar-constrained decoding restricted to one choice, as served engines
offer it (guided choice); it is used by the explorer scaffold so that a small model names a real tool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch


@dataclass
class TokenTrie:
    children: dict[int, "TokenTrie"] = field(default_factory=dict)
    end: bool = False

    @classmethod
    def build(cls, sequences: Iterable[Sequence[int]]) -> "TokenTrie":
        root = cls()
        for seq in sequences:
            if not seq:
                raise ValueError("empty allowed sequence")
            node = root
            for tok in seq:
                node = node.children.setdefault(int(tok), cls())
            node.end = True
        if not root.children:
            raise ValueError("no allowed sequences")
        return root

    def allowed(self) -> list[int]:
        return list(self.children)

    def advance(self, token: int) -> "TokenTrie | None":
        """The node after ``token``; None once an allowed sequence is complete (the constraint ends there).

        A token outside the trie (only possible if the caller did not mask) also ends the constraint."""
        node = self.children.get(int(token))
        if node is None or node.end:
            return None
        return node


def mask_logits(logits: torch.Tensor, allowed: Sequence[Sequence[int] | None]) -> torch.Tensor:
    """Rows with an allowed list keep only those logits (the rest -inf); rows with None are unchanged."""
    if all(a is None for a in allowed):
        return logits
    out = logits.clone()
    for j, ids in enumerate(allowed):
        if ids is not None:
            keep = torch.full_like(out[j], float("-inf"))
            idx = torch.tensor(list(ids), dtype=torch.long, device=out.device)
            keep[idx] = out[j, idx]
            out[j] = keep
    return out
