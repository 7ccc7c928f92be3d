"""Ragged forward passes: rows of different lengths in one forward, without padding their new tokens.

A padded batch (``(B, T)`` input) makes every row pay for the longest one: a row joining mid-decode with a
40-token observation either runs in a forward of its own (the other rows wait, and the weights are read once more)
or pads every other row to 40 tokens. Here the new tokens of all rows are packed into one sequence of
``sum(n_i)`` tokens, so a decode step and the prefill of joining rows share one pass over the weights:

* the linear layers, norms and rotary embeddings are per token, so they run on the packed sequence as is
  (explicit per-token ``position_ids``);
* ``RaggedCache.update`` writes each row's slice of the new keys/values into that row's slot of a ``KVSlots``
  pool (one ``(slots, kv_heads, capacity, dim)`` buffer per layer; row ``i`` is slot ``i``);
* ``ragged_attention`` attends the last query of every row in one call over the pool (a per-row length mask),
  and the other queries of a row that brought several tokens causally, row by row.

Works for decoder-only transformers models whose attention goes through ``ALL_ATTENTION_FUNCTIONS`` and
``past_key_values.update`` (Llama, Qwen2, Mistral, SmolLM...) with full causal attention; the attention
implementation is switched only for the duration of a ragged forward, so training is unaffected.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

RAGGED = "evolvekit_ragged"

Layers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each (1, kv_heads, length, dim)


class KVSlots:
    """Keys and values of the live rows of a batch: slot ``i`` holds row ``i``'s first ``lengths[i]`` positions.

    Rows are kept dense (slots ``0..len-1``): removing a row moves the last row into its slot. Buffers grow by
    ``spare`` columns (and slots) at a time, so appending a token rarely re-allocates.
    """

    def __init__(self, spare: int = 128) -> None:
        self.spare = spare
        self.lengths: list[int] = []
        self.keys: list[torch.Tensor] = []  # per layer (slots, kv_heads, capacity, dim), allocated on first use
        self.values: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.lengths)

    # -- rows ---------------------------------------------------------------------------------------------
    def append(self, layers: Layers | None = None, n: int = 0) -> int:
        """A new row (last slot) starting from the first ``n`` positions of ``layers`` (copied); its index."""
        slot = len(self.lengths)
        self.lengths.append(0)
        if n:
            if not self.keys:
                self._allocate_like(layers[0][0], slot + 1, n, layers=len(layers))
            self.reserve(slot + 1, n)
            for li, (k, v) in enumerate(layers):
                self.keys[li][slot, :, :n] = k[0, :, :n]
                self.values[li][slot, :, :n] = v[0, :, :n]
            self.lengths[slot] = n
        return slot

    def remove(self, slot: int) -> None:
        """Drop row ``slot``; the last row moves into its slot (callers mirror this on their row list)."""
        last = len(self.lengths) - 1
        if slot != last:
            n = self.lengths[last]
            for k, v in zip(self.keys, self.values):
                k[slot, :, :n] = k[last, :, :n]
                v[slot, :, :n] = v[last, :, :n]
            self.lengths[slot] = n
        self.lengths.pop()

    def extract(self, slot: int) -> Layers:
        """A copy of row ``slot``'s keys/values, per layer ``(1, kv_heads, length, dim)``."""
        n = self.lengths[slot]
        return [(k[slot:slot + 1, :, :n].clone(), v[slot:slot + 1, :, :n].clone())
                for k, v in zip(self.keys, self.values)]

    # -- buffers ------------------------------------------------------------------------------------------
    def _allocate_like(self, like: torch.Tensor, slots: int, columns: int, layers: int | None = None) -> None:
        shape = (slots, like.shape[1], columns + self.spare, like.shape[3])
        for _ in range(layers if layers is not None else 1):
            self.keys.append(like.new_zeros(shape))
            self.values.append(like.new_zeros(shape))

    def reserve(self, slots: int, columns: int) -> None:
        """Make room for ``slots`` rows of ``columns`` positions (existing buffers only)."""
        if not self.keys:
            return
        have_slots, have_cols = self.keys[0].shape[0], self.keys[0].shape[2]
        if slots <= have_slots and columns <= have_cols:
            return
        new_slots = max(slots, have_slots) + (4 if slots > have_slots else 0)
        new_cols = max(columns, have_cols) + (self.spare if columns > have_cols else 0)
        live, used = len(self.lengths), max(self.lengths, default=0)
        for store in (self.keys, self.values):
            for li, old in enumerate(store):
                grown = old.new_zeros((new_slots, old.shape[1], new_cols, old.shape[3]))
                grown[:min(live, old.shape[0]), :, :used] = old[:live, :, :used]
                store[li] = grown

    def write(self, layer: int, slot: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Put ``(1, kv_heads, n, dim)`` new keys/values after row ``slot``'s current positions."""
        start = self.lengths[slot]
        self.keys[layer][slot, :, start:start + k.shape[2]] = k[0]
        self.values[layer][slot, :, start:start + v.shape[2]] = v[0]


class RaggedCache:
    """The ``past_key_values`` of one ragged forward: row ``i`` owns tokens ``offsets[i]:offsets[i]+counts[i]`` of
    the packed sequence and slot ``i`` of ``slots``. ``commit()`` after the forward advances the rows."""

    def __init__(self, slots: KVSlots, counts: Sequence[int], device: torch.device) -> None:
        self.slots, self.counts = slots, list(counts)
        self.offsets = [0]
        for n in self.counts[:-1]:
            self.offsets.append(self.offsets[-1] + n)
        self.totals = [length + n for length, n in zip(slots.lengths, self.counts)]
        self.width = max(self.totals)
        self.decode_only = all(n == 1 for n in self.counts)
        rows = len(self.counts)
        self.last = torch.tensor([o + n - 1 for o, n in zip(self.offsets, self.counts)], device=device)
        if self.decode_only:
            self.rows_idx = torch.arange(rows, device=device)
            self.cols_idx = torch.tensor(slots.lengths, device=device)
        # keys each row's last query may see (None when every row sees the full width)
        self.mask = None if min(self.totals) == self.width else \
            (torch.arange(self.width, device=device) < torch.tensor(self.totals, device=device)[:, None])[:, None, None]
        # a pool with buffers gets its room now; a fresh one allocates in write() (shapes come with the first keys)
        slots.reserve(rows, self.width)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        s = self.slots
        if layer_idx == len(s.keys):  # the first forward of a fresh pool: this layer's buffers, shaped like its keys
            s._allocate_like(key_states, len(self.counts), self.width, layers=1)
        if self.decode_only:  # one indexed write for every row
            s.keys[layer_idx][self.rows_idx, :, self.cols_idx] = key_states[0].transpose(0, 1)
            s.values[layer_idx][self.rows_idx, :, self.cols_idx] = value_states[0].transpose(0, 1)
        else:
            for slot, (o, n) in enumerate(zip(self.offsets, self.counts)):
                s.write(layer_idx, slot, key_states[:, :, o:o + n], value_states[:, :, o:o + n])
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always given explicitly

    def commit(self) -> None:
        self.slots.lengths = list(self.totals)


def ragged_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     ragged_cache: RaggedCache | None = None, **kwargs):
    """Attention of a ragged forward (``query``: ``(1, heads, sum n_i, dim)``); returns ``(1, sum n_i, heads, dim)``.

    Row ``i``'s query ``j`` (of ``n_i``) sees its first ``length_i + j + 1`` keys. The last query of every row
    sees all of its keys: those run in one call over the pool, with their query heads packed onto the KV heads
    (grouped-query attention without copying keys); the earlier queries of a multi-token row run per row.
    """
    if ragged_cache is None:
        raise RuntimeError("ragged_attention needs ragged_cache (use ragged_forward)")
    c, layer = ragged_cache, module.layer_idx
    rows, heads, dim = len(c.counts), query.shape[1], query.shape[3]
    keys, values = c.slots.keys[layer][:rows, :, :c.width], c.slots.values[layer][:rows, :, :c.width]
    kv_heads = keys.shape[1]
    out = query.new_empty(query.shape) if not c.decode_only else None
    q_last = query[0].index_select(1, c.last).transpose(0, 1).reshape(rows, kv_heads, heads // kv_heads, dim)
    last = F.scaled_dot_product_attention(q_last, keys, values, attn_mask=c.mask, scale=scaling)
    last = last.reshape(rows, heads, dim)
    if c.decode_only:
        return last.unsqueeze(0), None  # (1, rows, heads, dim): one token per row
    out[0].index_copy_(1, c.last, last.transpose(0, 1))
    for i, (o, n) in enumerate(zip(c.offsets, c.counts)):
        if n > 1:
            total = c.totals[i]
            k, v = keys[i:i + 1, :, :total], values[i:i + 1, :, :total]
            causal = torch.ones((n - 1, total), dtype=torch.bool, device=query.device).tril(diagonal=total - n)
            out[:, :, o:o + n - 1] = F.scaled_dot_product_attention(
                query[:, :, o:o + n - 1], k, v, attn_mask=causal, scale=scaling, enable_gqa=kv_heads != heads)
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
def ragged_forward(model: torch.nn.Module, slots: KVSlots, new_tokens: Sequence[Sequence[int]]) -> torch.Tensor:
    """Feed ``new_tokens[i]`` (at least one) after row ``i``'s KV in ``slots``, append their KV, and return the
    next-token logits of every row, ``(len(slots), vocab)``."""
    counts = [len(t) for t in new_tokens]
    if len(counts) != len(slots) or not counts or min(counts) < 1:
        raise ValueError("every row of the pool needs at least one new token")
    dev = next(model.parameters()).device
    ids = torch.tensor([[t for toks in new_tokens for t in toks]], dtype=torch.long, device=dev)
    pos = torch.tensor([[length + j for length, n in zip(slots.lengths, counts) for j in range(n)]],
                       dtype=torch.long, device=dev)
    cache = RaggedCache(slots, counts, dev)
    mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=dev)  # a 4D mask is passed through untouched
    with _attention(model, RAGGED):
        out = model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True,
                    logits_to_keep=cache.last, ragged_cache=cache)
    cache.commit()
    return out.logits[0]
