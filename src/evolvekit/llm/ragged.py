"""Ragged forward passes: several rows of different lengths in one forward, each row with its own KV cache.

A padded batch (``(B, T)`` input, one ``(B, heads, T, dim)`` cache) makes every row pay for the longest one: a row
joining mid-decode with a 40-token observation either runs in a forward of its own (the other rows wait, and the
weights are read once more) or pads every other row to 40 tokens. Here the new tokens of all rows are packed into
one sequence of ``sum(n_i)`` tokens, so a decode step and the prefill of joining rows share one pass over the
weights, and nothing is padded:

* the linear layers, norms and rotary embeddings are per token, so they run on the packed sequence as is
  (explicit per-token ``position_ids``);
* ``RaggedCache.update`` appends each row's slice of the new keys/values to that row's own growing buffer;
* ``ragged_attention`` attends each row's queries to that row's keys only, causally (its last ``n_i`` keys are the
  new tokens).

Works for decoder-only transformers models whose attention goes through ``ALL_ATTENTION_FUNCTIONS`` and
``past_key_values.update`` (Llama, Qwen2, Mistral, SmolLM...) with full causal attention; the attention
implementation is switched only for the duration of a ragged forward, so training is unaffected.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

RAGGED = "evolvekit_ragged"


@dataclass
class RowKV:
    """One row's keys and values per layer: ``(1, kv_heads, capacity, dim)`` buffers, the first ``length`` in use."""

    length: int = 0
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    spare: int = 64  # columns allocated beyond the need, so appending a token rarely re-allocates

    @classmethod
    def from_prefix(cls, layers: Sequence[tuple[torch.Tensor, torch.Tensor]], n: int) -> RowKV:
        """A row starting from the first ``n`` positions of per-layer ``(keys, values)`` (copied, never aliased)."""
        row = cls()
        for k, v in layers:
            row.keys.append(row._alloc(k, n))
            row.values.append(row._alloc(v, n))
            row.keys[-1][:, :, :n] = k[:, :, :n]
            row.values[-1][:, :, :n] = v[:, :, :n]
        row.length = n
        return row

    def _alloc(self, like: torch.Tensor, need: int) -> torch.Tensor:
        shape = list(like.shape)
        shape[0], shape[2] = 1, need + self.spare
        return like.new_empty(shape)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Put ``(1, kv_heads, n, dim)`` new keys/values at positions ``length..length+n`` of ``layer``."""
        end = self.length + k.shape[2]
        if layer == len(self.keys):
            self.keys.append(self._alloc(k, end))
            self.values.append(self._alloc(v, end))
        elif end > self.keys[layer].shape[2]:
            grown_k, grown_v = self._alloc(k, end + end // 4), self._alloc(v, end + end // 4)
            grown_k[:, :, :self.length] = self.keys[layer][:, :, :self.length]
            grown_v[:, :, :self.length] = self.values[layer][:, :, :self.length]
            self.keys[layer], self.values[layer] = grown_k, grown_v
        self.keys[layer][:, :, self.length:end] = k
        self.values[layer][:, :, self.length:end] = v

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer ``(keys, values)`` views of the positions in use."""
        return [(k[:, :, :self.length], v[:, :, :self.length]) for k, v in zip(self.keys, self.values)]


class RaggedCache:
    """The ``past_key_values`` of one ragged forward: row ``i`` owns tokens ``offsets[i]:offsets[i]+counts[i]`` of
    the packed sequence and the KV in ``rows[i]``. Call ``commit()`` after the forward to advance the rows."""

    def __init__(self, rows: Sequence[RowKV], counts: Sequence[int]) -> None:
        self.rows, self.counts = list(rows), list(counts)
        self.offsets = [0]
        for n in self.counts[:-1]:
            self.offsets.append(self.offsets[-1] + n)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        for row, o, n in zip(self.rows, self.offsets, self.counts):
            row.write(layer_idx, key_states[:, :, o:o + n], value_states[:, :, o:o + n])
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always given explicitly

    def commit(self) -> None:
        for row, n in zip(self.rows, self.counts):
            row.length += n


def ragged_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     ragged_cache: RaggedCache | None = None, **kwargs):
    """Attention of a ragged forward (``query``: ``(1, heads, sum n_i, dim)``); returns ``(1, sum n_i, heads, dim)``.

    Row ``i``'s queries attend to its own first ``length_i + n_i`` keys; query ``j`` sees keys up to
    ``length_i + j``. A single new token (a decode step) sees every key, with its query heads packed onto the KV
    heads (grouped-query attention without copying the keys).
    """
    if ragged_cache is None:
        raise RuntimeError("ragged_attention needs ragged_cache (use ragged_forward)")
    layer = module.layer_idx
    heads, dim = query.shape[1], query.shape[3]
    out = query.new_empty(query.shape)
    for row, o, n in zip(ragged_cache.rows, ragged_cache.offsets, ragged_cache.counts):
        total = row.length + n
        k, v = row.keys[layer][:, :, :total], row.values[layer][:, :, :total]
        q = query[:, :, o:o + n]
        if n == 1:
            kv_heads = k.shape[1]
            y = F.scaled_dot_product_attention(q.reshape(1, kv_heads, heads // kv_heads, dim), k, v, scale=scaling)
            out[:, :, o:o + 1] = y.reshape(1, heads, 1, dim)
        else:
            causal = torch.ones((n, total), dtype=torch.bool, device=q.device).tril(diagonal=total - n)
            out[:, :, o:o + n] = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, scale=scaling,
                                                                enable_gqa=k.shape[1] != heads)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(RAGGED, ragged_attention)


@contextmanager
def _attention(model: torch.nn.Module, name: str) -> Iterator[None]:
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


@torch.no_grad()
def ragged_forward(model: torch.nn.Module, rows: Sequence[RowKV], new_tokens: Sequence[Sequence[int]]) -> torch.Tensor:
    """Feed ``new_tokens[i]`` (at least one) after row ``i``'s KV, append their KV to the rows, and return the
    next-token logits of every row, ``(len(rows), vocab)``."""
    counts = [len(t) for t in new_tokens]
    if not rows or min(counts) < 1:
        raise ValueError("every row needs at least one new token")
    dev = model.device if hasattr(model, "device") else next(model.parameters()).device
    ids = torch.tensor([[t for toks in new_tokens for t in toks]], dtype=torch.long, device=dev)
    pos = torch.tensor([[row.length + j for row, n in zip(rows, counts) for j in range(n)]], dtype=torch.long,
                       device=dev)
    cache = RaggedCache(rows, counts)
    last = torch.tensor([o + n - 1 for o, n in zip(cache.offsets, counts)], dtype=torch.long, device=dev)
    mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=dev)  # a 4D mask is passed through untouched
    with _attention(model, RAGGED):
        out = model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True,
                    logits_to_keep=last, ragged_cache=cache)
    cache.commit()
    return out.logits[0]
