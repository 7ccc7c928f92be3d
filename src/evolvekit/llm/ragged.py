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
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

RAGGED = "evolvekit_ragged"

Layers = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each (1, kv_heads, length, dim)

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # SDPA that also returns the log-sum-exp


def cascade_supported(device: torch.device) -> bool:
    """Cascade attention over a shared prefix needs the log-sum-exp of each part: PyTorch's CPU flash kernel."""
    return torch.device(device).type == "cpu"


@dataclass
class RowCopy:
    """A row's KV kept outside the pool (an episode between two turns): positions ``start..`` are in ``own``; the
    first ``start`` are the shared, read-only ``prefix`` (``start`` 0: no prefix)."""

    prefix: Layers | None
    own: Layers
    start: int

    def full(self, n: int) -> Layers:
        """The first ``n`` positions as plain per-layer tensors (copies the prefix part when there is one)."""
        if self.prefix is None:
            return [(k[:, :, :n], v[:, :, :n]) for k, v in self.own]
        return [
            (
                torch.cat([pk[:, :, : self.start], k], dim=2)[:, :, :n],
                torch.cat([pv[:, :, : self.start], v], dim=2)[:, :, :n],
            )
            for (pk, pv), (k, v) in zip(self.prefix, self.own)
        ]


class KVSlots:
    """Keys and values of the live rows of a batch; slot ``i`` is row ``i``, which has ``lengths[i]`` positions.

    A row starting with the pool's shared ``prefix`` (system prompt, tools, worked examples: the same KV for every
    rollout) does not copy it: its slot holds only positions ``starts[i]..`` and attention reads the prefix once for
    all such rows (cascade attention, see ``ragged_attention``). Rows are kept dense (slots ``0..len-1``): removing
    a row moves the last row into its slot. Buffers grow by ``spare`` columns (and slots) at a time.
    """

    def __init__(self, spare: int = 128) -> None:
        self.spare = spare
        self.lengths: list[int] = []  # positions per row, prefix included
        self.starts: list[int] = []  # per row: 0, or len(prefix) when the row starts with the shared prefix
        self.prefix: Layers | None = None
        self.keys: list[torch.Tensor] = []  # per layer (slots, kv_heads, capacity, dim), allocated on first use
        self.values: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self.lengths)

    def columns(self, slot: int) -> int:
        """Positions of row ``slot`` held in its slot (the rest is the shared prefix)."""
        return self.lengths[slot] - self.starts[slot]

    # -- rows ---------------------------------------------------------------------------------------------
    def append(self, layers: Layers | None = None, n: int = 0) -> int:
        """A new row (last slot) starting from the first ``n`` positions of ``layers`` (copied); its index."""
        return self._add(layers, n, 0)

    def append_shared(self, prefix: Layers, n: int) -> int:
        """A new row whose first ``n`` positions are the shared ``prefix`` (all of it; never written to).

        The first such row makes it the pool's prefix; a row with another prefix (or off CPU, see
        ``cascade_supported``) gets a copy of it instead."""
        if n == prefix[0][0].shape[2] and self._can_share(prefix):
            self.prefix = prefix
            return self._add(None, 0, n)
        return self._add(prefix, n, 0)

    def append_copy(self, copy: RowCopy, n: int) -> int:
        """A new row from the first ``n`` positions of a kept row (see ``extract``)."""
        if copy.prefix is not None and n >= copy.start and self._can_share(copy.prefix):
            self.prefix = copy.prefix
            return self._add(copy.own, n - copy.start, copy.start)
        return self._add(copy.full(n), n, 0)

    def _can_share(self, prefix: Layers) -> bool:
        """Rows may reference ``prefix``: it is the pool's prefix (or the pool has none yet) on a cascade device."""
        return (self.prefix is None or self.prefix is prefix) and cascade_supported(prefix[0][0].device)

    def _add(self, layers: Layers | None, cols: int, start: int) -> int:
        slot = len(self.lengths)
        if cols:
            assert layers is not None  # columns to copy come from some layers
            if not self.keys:
                self._allocate_like(layers[0][0], slot + 1, cols, layers=len(layers))
            self.reserve(slot + 1, cols)
        self.lengths.append(start + cols)
        self.starts.append(start)
        if cols and layers is not None:
            for li, (k, v) in enumerate(layers):
                self.keys[li][slot, :, :cols] = k[0, :, :cols]
                self.values[li][slot, :, :cols] = v[0, :, :cols]
        return slot

    def remove(self, slot: int) -> None:
        """Drop row ``slot``; the last row moves into its slot (callers mirror this on their row list)."""
        last = len(self.lengths) - 1
        if slot != last:
            n = self.columns(last)
            for k, v in zip(self.keys, self.values):
                k[slot, :, :n] = k[last, :, :n]
                v[slot, :, :n] = v[last, :, :n]
            self.lengths[slot], self.starts[slot] = self.lengths[last], self.starts[last]
        self.lengths.pop()
        self.starts.pop()

    def extract(self, slot: int) -> RowCopy:
        """A copy of row ``slot``'s own positions (the shared prefix is referenced, not copied)."""
        n, start = self.columns(slot), self.starts[slot]
        own = [
            (k[slot : slot + 1, :, :n].clone(), v[slot : slot + 1, :, :n].clone())
            for k, v in zip(self.keys, self.values)
        ]
        return RowCopy(prefix=self.prefix if start else None, own=own, start=start)

    # -- buffers ------------------------------------------------------------------------------------------
    def _allocate_like(self, like: torch.Tensor, slots: int, columns: int, layers: int = 1) -> None:
        shape = (slots, like.shape[1], columns + self.spare, like.shape[3])
        for _ in range(layers):
            self.keys.append(like.new_zeros(shape))
            self.values.append(like.new_zeros(shape))

    def reserve(self, slots: int, columns: int) -> None:
        """Make room for ``slots`` rows of ``columns`` own positions (existing buffers only)."""
        if not self.keys:
            return
        have_slots, have_cols = self.keys[0].shape[0], self.keys[0].shape[2]
        if slots <= have_slots and columns <= have_cols:
            return
        new_slots = max(slots, have_slots) + (4 if slots > have_slots else 0)
        new_cols = max(columns, have_cols) + (self.spare if columns > have_cols else 0)
        live = min(len(self.lengths), have_slots)
        used = min(max((self.columns(i) for i in range(live)), default=0), have_cols)
        for store in (self.keys, self.values):
            for li, old in enumerate(store):
                grown = old.new_zeros((new_slots, old.shape[1], new_cols, old.shape[3]))
                grown[:live, :, :used] = old[:live, :, :used]
                store[li] = grown

    def write(self, layer: int, slot: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Put ``(1, kv_heads, n, dim)`` new keys/values after row ``slot``'s current positions."""
        c = self.columns(slot)
        self.keys[layer][slot, :, c : c + k.shape[2]] = k[0]
        self.values[layer][slot, :, c : c + v.shape[2]] = v[0]


class RaggedCache:
    """The ``past_key_values`` of one ragged forward: row ``i`` owns tokens ``offsets[i]:offsets[i]+counts[i]`` of
    the packed sequence and slot ``i`` of ``slots``. ``commit()`` after the forward advances the rows."""

    def __init__(self, slots: KVSlots, counts: Sequence[int], device: torch.device) -> None:
        self.slots, self.counts = slots, list(counts)
        rows = len(self.counts)
        self.offsets = [0]
        for n in self.counts[:-1]:
            self.offsets.append(self.offsets[-1] + n)
        self.cols = [slots.columns(i) for i in range(rows)]  # own positions before this forward
        self.own = [c + n for c, n in zip(self.cols, self.counts)]  # ... and after it (at least 1)
        self.width = max(self.own)
        self.decode_only = all(n == 1 for n in self.counts)
        self.last = torch.tensor([o + n - 1 for o, n in zip(self.offsets, self.counts)], device=device)
        if self.decode_only:
            self.rows_idx = torch.arange(rows, device=device)
            self.cols_idx = torch.tensor(self.cols, device=device)
        shared = [i for i in range(rows) if slots.starts[i]]
        self.shared = (
            None if not shared else (slice(None) if len(shared) == rows else torch.tensor(shared, device=device))
        )
        self._device = device
        self._mask: torch.Tensor | None = None
        self._causal: dict[int, torch.Tensor] = {}
        # a pool with buffers gets its room now; a fresh one allocates in update() (shapes come with the first keys)
        slots.reserve(rows, self.width)

    def mask(self, dtype: torch.dtype) -> torch.Tensor | None:
        """Additive mask of the own columns each row's last query may see (None: all rows see the full width)."""
        if self._mask is None and min(self.own) < self.width:
            seen = torch.arange(self.width, device=self._device) < torch.tensor(self.own, device=self._device)[:, None]
            mask = torch.zeros(seen.shape, dtype=dtype, device=self._device).masked_fill_(~seen, float("-inf"))
            self._mask = mask[:, None, None]
        return self._mask

    def causal(self, row: int, groups: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask of a multi-token row's earlier queries over its own columns (query ``j`` sees columns up
        to ``cols + j``), repeated for the ``groups`` query heads packed on each KV head; built once per forward."""
        if row not in self._causal:
            n, own = self.counts[row], self.own[row]
            seen = torch.ones((n - 1, own), dtype=torch.bool, device=self._device).tril(diagonal=own - n)
            mask = torch.zeros(seen.shape, dtype=dtype, device=self._device).masked_fill_(~seen, float("-inf"))
            self._causal[row] = mask.repeat(groups, 1)
        return self._causal[row]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        s = self.slots
        if layer_idx == len(s.keys):  # the first forward of a fresh pool: this layer's buffers, shaped like its keys
            s._allocate_like(key_states, len(self.counts), self.width)
        if self.decode_only:  # one indexed write for every row
            s.keys[layer_idx][self.rows_idx, :, self.cols_idx] = key_states[0].transpose(0, 1)
            s.values[layer_idx][self.rows_idx, :, self.cols_idx] = value_states[0].transpose(0, 1)
        else:
            for slot, (o, n) in enumerate(zip(self.offsets, self.counts)):
                s.write(layer_idx, slot, key_states[:, :, o : o + n], value_states[:, :, o : o + n])
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always given explicitly

    def commit(self) -> None:
        self.slots.lengths = [start + own for start, own in zip(self.slots.starts, self.own)]


def _merge(out: torch.Tensor, lse: torch.Tensor, out2: torch.Tensor, lse2: torch.Tensor) -> torch.Tensor:
    """Softmax attention over two disjoint key sets, from each part's output and log-sum-exp (exact)."""
    m = torch.maximum(lse, lse2)  # the log-sum-exps are fp32 whatever the model dtype
    w, w2 = (lse - m).exp().unsqueeze(-1), (lse2 - m).exp().unsqueeze(-1)
    return ((out.float() * w + out2.float() * w2) / (w + w2)).to(out.dtype)


def ragged_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    ragged_cache: RaggedCache | None = None,
    **kwargs,
):
    """Attention of a ragged forward (``query``: ``(1, heads, sum n_i, dim)``); returns ``(1, sum n_i, heads, dim)``.

    Row ``i``'s query ``j`` (of ``n_i``) sees the shared prefix (if the row has it) and its own keys up to its
    position. Query heads are packed onto the KV heads (grouped-query attention without copying keys). The last
    query of every row runs in one call over the pool; rows on the shared prefix attend to it in one more call,
    and the two parts are merged by their log-sum-exp (cascade attention: the prefix is read once per step, not
    once per row). The earlier queries of a multi-token row (a prompt being prefilled) run per row.
    """
    if ragged_cache is None:
        raise RuntimeError("ragged_attention needs ragged_cache (use ragged_forward)")
    c, layer = ragged_cache, int(module.layer_idx)  # type: ignore[arg-type]  # an int attribute of HF attention
    prefix = c.slots.prefix
    rows, heads, dim = len(c.counts), query.shape[1], query.shape[3]
    keys, values = c.slots.keys[layer][:rows, :, : c.width], c.slots.values[layer][:rows, :, : c.width]
    kv_heads = keys.shape[1]
    g = heads // kv_heads
    q_last = query[0].index_select(1, c.last).transpose(0, 1).reshape(rows, kv_heads, g, dim)
    mask = c.mask(query.dtype)
    if c.shared is None:
        last = F.scaled_dot_product_attention(q_last, keys, values, attn_mask=mask, scale=scaling)
    else:
        last, lse = _flash(q_last, keys, values, attn_mask=mask, scale=scaling)
        assert prefix is not None  # rows on the shared prefix exist only with a prefix
        pk, pv = prefix[layer]
        qs = q_last[c.shared]
        n_sh = qs.shape[0]
        po, plse = _flash(qs.transpose(0, 1).reshape(1, kv_heads, n_sh * g, dim), pk, pv, scale=scaling)
        po = po.reshape(kv_heads, n_sh, g, dim).transpose(0, 1)
        plse = plse.reshape(kv_heads, n_sh, g).transpose(0, 1)
        merged = _merge(last[c.shared], lse[c.shared], po, plse)
        if isinstance(c.shared, slice):
            last = merged
        else:
            last = last.index_copy(0, c.shared, merged)
    last = last.reshape(rows, heads, dim)
    if c.decode_only:
        return last.unsqueeze(0), None  # (1, rows, heads, dim): one token per row
    out = query.new_empty(query.shape)
    out[0].index_copy_(1, c.last, last.transpose(0, 1))
    for i, (o, n) in enumerate(zip(c.offsets, c.counts)):
        if n == 1:
            continue
        # queries o..o+n-2, packed as (1, kv_heads, g * (n-1), dim): group-major, position-minor
        q = query[:, :, o : o + n - 1].reshape(1, kv_heads, g * (n - 1), dim)
        own, add = c.own[i], c.causal(i, g, query.dtype)
        k, v = keys[i : i + 1, :, :own], values[i : i + 1, :, :own]
        if c.slots.starts[i]:
            y, lse = _flash(q, k, v, attn_mask=add, scale=scaling)
            assert prefix is not None
            pk, pv = prefix[layer]
            y2, lse2 = _flash(q, pk, pv, scale=scaling)
            y = _merge(y, lse, y2, lse2)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=add, scale=scaling)
        out[:, :, o : o + n - 1] = y.reshape(1, heads, n - 1, dim)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(RAGGED, ragged_attention)


@contextmanager
def _attention(model: torch.nn.Module, name: str) -> Iterator[None]:
    config: Any = model.config
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
    pos = torch.tensor(
        [[length + j for length, n in zip(slots.lengths, counts) for j in range(n)]], dtype=torch.long, device=dev
    )
    cache = RaggedCache(slots, counts, dev)
    mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=dev)  # a 4D mask is passed through untouched
    with _attention(model, RAGGED):
        out = model(
            input_ids=ids,
            position_ids=pos,
            attention_mask=mask,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=cache.last,
            ragged_cache=cache,
        )
    cache.commit()
    return out.logits[0]
