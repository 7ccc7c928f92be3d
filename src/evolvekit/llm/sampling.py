"""Pure sampling helpers shared by the local backend and the continuous batcher (no model, no backend state)."""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["Generators", "common_prefix_len", "cut_at_stops", "inverse_cdf_sample", "sample_next"]

Generators = torch.Generator | Sequence[torch.Generator] | None  # one stream for all rows, or one per row


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, generator: Generators) -> torch.Tensor:
    """Pick one token per row from raw logits with temperature and nucleus sampling (greedy at T=0)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, sorted_idx = probs.sort(dim=-1, descending=True)
        cum = sorted_probs.cumsum(dim=-1)
        drop = cum - sorted_probs > top_p  # keep the smallest prefix whose mass reaches top_p
        choice = inverse_cdf_sample(sorted_probs.masked_fill(drop, 0.0), generator)
        return sorted_idx.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
    return inverse_cdf_sample(probs, generator)


def inverse_cdf_sample(weights: torch.Tensor, generator: Generators) -> torch.Tensor:
    """One index per row of non-negative, not necessarily normalised ``weights``, drawn with probability
    weight / row sum: the first index whose cumulative weight exceeds u * total, u ~ U[0, 1).

    One uniform number per row instead of one per vocabulary entry: at batch 8 over a 49k vocabulary on this CPU
    0.3 ms, against 7.8 ms for torch.multinomial or an exponential race. A zero weight is never drawn (its
    cumulative weight equals its predecessor's, so an earlier index already exceeds u * total). ``generator``: one
    stream for all rows, or a sequence with one per row (2-D ``weights``); either may live on the CPU while the
    weights are on a GPU.
    """
    cum = weights.double().cumsum(dim=-1)
    if generator is not None and not isinstance(generator, torch.Generator):
        u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generator]).to(weights.device)
        u = u.unsqueeze(-1)
    else:  # drawn where the generator lives (a seeded CPU stream gives the same numbers for weights on a GPU)
        where = generator.device if generator is not None else weights.device
        u = torch.rand(weights.shape[:-1] + (1,), generator=generator, dtype=torch.float64, device=where)
        u = u.to(weights.device)
    idx = torch.searchsorted(cum, u * cum[..., -1:], right=True).squeeze(-1)
    return idx.clamp(max=weights.shape[-1] - 1)


def common_prefix_len(rows: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by every row."""
    if not rows:
        return 0
    first, n = rows[0], min(len(r) for r in rows)
    for i in range(n):
        t = first[i]
        if any(r[i] != t for r in rows):
            return i
    return n


def cut_at_stops(text: str, stops: Sequence[str]) -> str:
    """``text`` up to its first stop string (all of it when none occurs)."""
    positions = [text.find(s) for s in stops if s in text]
    return text[: min(positions)] if positions else text
