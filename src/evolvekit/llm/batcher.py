"""Continuous batching for the local backend: one KV cache whose rows join and leave between decode steps.

A lock-step batch waits for its slowest row: rows that stopped early leave the batch, and the few left decode
at almost the cost of a full batch (a 135M model on CPU is bound by weight reads, not by rows). Here a caller
adds rows whenever it has prompts (a rollout whose tool call just finished, a new episode) and calls ``step()``;
every step samples one token for every live row, drops the rows that finished and returns their completions, so
the batch stays full while there is work.

Rows are left-padded to a common cache length: a new row's prefill cache is merged with the live cache by
padding the shorter one on the left (masked out; positions are explicit, so padding changes nothing), and columns
that no live row needs any more are trimmed. Prompts starting with the backend's cached shared prefix (system
prompt, tools, worked examples) prefill only their own suffix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Hashable, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.llm.constrain import TokenTrie, mask_logits
from evolvekit.llm.local import common_prefix_len

if TYPE_CHECKING:
    from evolvekit.llm.local import LocalLLM


def json_end_index(text: str) -> int | None:
    """Index just past the end of ``text``'s leading bare JSON object or list (brackets balanced outside strings),
    or None while it is incomplete or ``text`` does not start with one.

    Decoding economy (AgentEvolver/EvolveR action formats): a bare JSON tool call is complete at its closing
    bracket, and whatever a small model rambles after it is never parsed, so sampling stops there. The same holds
    for the JSON of a ``<tool_call>`` block (the caller restores the closing tag).
    """
    i = len(text) - len(text.lstrip())
    if text.startswith("<tool_call>", i):  # a tagged call is complete at its JSON's end, closing tag or not
        i += len("<tool_call>")
        i += len(text[i:]) - len(text[i:].lstrip())
    if i >= len(text) or text[i] not in "{[":
        return None
    depth, in_str, esc = 0, False, False
    for j in range(i, len(text)):
        ch = text[j]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def balanced_json_end(text: str) -> bool:
    """True once ``text`` starts with one complete JSON action (see ``json_end_index``)."""
    return json_end_index(text) is not None


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values are views of a buffer with spare columns.

    ``DynamicLayer.update`` concatenates, i.e. copies the whole cache of the batch for every decoded token; here a
    token is written in place and the buffer is re-allocated only every ``spare`` tokens, or when rows joined or
    left (whoever replaces ``keys``/``values`` makes the next update rebuild the buffer from them).
    """

    spare = 64

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        view = getattr(self, "_view", None)
        cur = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        if view is None or self.keys is not view[0] or cur + n > self._buf[0].shape[-2]:
            shape = list(key_states.shape)
            shape[-2] = cur + n + self.spare
            bufs = (key_states.new_empty(shape), value_states.new_empty(shape))
            if cur:
                bufs[0][:, :, :cur], bufs[1][:, :, :cur] = self.keys, self.values
            self._buf = bufs
        self._buf[0][:, :, cur:cur + n] = key_states
        self._buf[1][:, :, cur:cur + n] = value_states
        self.keys, self.values = self._buf[0][:, :, :cur + n], self._buf[1][:, :, :cur + n]
        self._view = (self.keys, self.values)
        return self.keys, self.values


def new_cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()) -> DynamicCache:
    """An empty cache of growing layers, or one that starts from (not copies) the given keys/values per layer.

    The given tensors are never written to: the first update copies them into a fresh buffer.
    """
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    for k, v in layers:
        layer = GrowingLayer()
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
        cache.layers.append(layer)
    return cache


@dataclass
class _Row:
    key: Hashable
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = "length"
    stopped_on_string: bool = False
    stopped_on_json: bool = False
    text_prefix: str = ""  # text already in the prompt that the completion continues (stop checks see both)
    trie: TokenTrie | None = None  # while set, sampling is restricted to this node's children (llm/constrain.py)


def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)


class DecodeBatch:
    """Live rows of one sampling configuration over one shared KV cache (see the module docstring)."""

    def __init__(self, llm: LocalLLM, params: SamplingParams, generator: torch.Generator | None = None,
                 keep_rows: bool = False) -> None:
        self.llm, self.params = llm, params
        # keep_rows: a finished row's KV (prompt + completion) is kept under its key, so when the same key comes
        # back with a longer prompt (the next turn of an episode) only the new tokens are prefilled; forget(key).
        self.keep_rows = keep_rows
        self.kept: dict[Hashable, tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]] = {}
        self.prefilled_tokens = 0
        if generator is None and params.seed is not None:
            generator = torch.Generator(device="cpu").manual_seed(params.seed)
        self.generator = generator
        self.rows: list[_Row] = []
        self.cache = None
        self.attn: torch.Tensor | None = None  # (B, T): 1 where a row has a real token in the cache
        self.next_pos: torch.Tensor | None = None  # (B,): position of each row's next token
        self.logits: torch.Tensor | None = None  # (B, V): next-token logits of each row
        self.forward_calls = 0

    def __len__(self) -> int:
        return len(self.rows)

    # -- joining ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def add(self, items: Sequence[tuple[Hashable, Sequence[int]]], text_prefixes: Sequence[str] | None = None,
            constraints: Sequence[TokenTrie | None] | None = None) -> None:
        """Prefill ``(key, prompt ids)`` rows and merge them into the live batch.

        ``text_prefixes``: per row, the start of the reply that the prompt already contains (a response prefix such
        as an opened tool call); the balanced-JSON stop checks prefix + completion. ``constraints``: per row, a
        ``TokenTrie`` its first tokens must follow (a choice among known strings), or None.
        """
        if not items:
            return
        prompts = [list(p) for _, p in items]
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt")
        cache, attn, pos, logits = self._prefill([k for k, _ in items], prompts)
        prefixes = list(text_prefixes) if text_prefixes is not None else [""] * len(items)
        tries = list(constraints) if constraints is not None else [None] * len(items)
        self.rows.extend(_Row(key=k, prompt=p, text_prefix=x, trie=c)
                         for (k, _), p, x, c in zip(items, prompts, prefixes, tries))
        if self.cache is None:
            self.cache, self.attn, self.next_pos, self.logits = cache, attn, pos, logits
            return
        width = max(self.attn.shape[1], attn.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers):
            mine.keys = torch.cat([_pad_left(mine.keys, width, 2), _pad_left(theirs.keys, width, 2)], dim=0)
            mine.values = torch.cat([_pad_left(mine.values, width, 2), _pad_left(theirs.values, width, 2)], dim=0)
        self.attn = torch.cat([_pad_left(self.attn, width, 1), _pad_left(attn, width, 1)], dim=0)
        self.next_pos = torch.cat([self.next_pos, pos])
        self.logits = torch.cat([self.logits, logits])

    def _prefill(self, keys: list[Hashable], prompts: list[list[int]]):
        """One forward over the new rows; each row starts from the longest KV it can reuse (its own kept KV or the
        backend's shared prefix). Row layout in the cache: [pad | reused KV | pad | own new tokens]."""
        llm, dev = self.llm, self.llm.device
        shared = llm.shared_prefix_len(prompts)
        entry = llm._prefix_kv(tuple(prompts[0][:shared])) if shared else None
        pasts: list[tuple[int, list | None]] = []
        for key, p in zip(keys, prompts):
            best = (shared, entry)
            kept = self.kept.pop(key, None)
            if kept is not None:
                c = min(common_prefix_len([kept[0], p]), len(p) - 1)
                if c > best[0]:
                    best = (c, [(k[:, :, :c], v[:, :, :c]) for k, v in kept[1]])
            pasts.append(best)
        B, P = len(prompts), max(n for n, _ in pasts)
        cache = new_cache()
        if P:
            ref = next(kv for n, kv in pasts if n)
            layers = []
            for li, (k0, v0) in enumerate(ref):
                ks = [_pad_left(kv[li][0], P, 2) if n else k0.new_zeros(k0.shape[:2] + (P, k0.shape[-1]))
                      for n, kv in pasts]
                vs = [_pad_left(kv[li][1], P, 2) if n else v0.new_zeros(v0.shape[:2] + (P, v0.shape[-1]))
                      for n, kv in pasts]
                layers.append((torch.cat(ks), torch.cat(vs)))
            cache = new_cache(layers)
        rows_in = [p[n:] for p, (n, _) in zip(prompts, pasts)]
        width = max(len(r) for r in rows_in)
        input_ids = torch.full((B, width), llm.tokenizer.pad_token_id, dtype=torch.long)
        attn = torch.zeros((B, P + width), dtype=torch.long)
        for i, (r, (n, _)) in enumerate(zip(rows_in, pasts)):
            attn[i, P - n:P] = 1
            input_ids[i, width - len(r):] = torch.tensor(r)
            attn[i, P + width - len(r):] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        past_len = torch.tensor([n for n, _ in pasts], device=dev).unsqueeze(-1)
        positions = (past_len + attn[:, P:].cumsum(-1) - 1).clamp(min=0)
        out = llm.model(input_ids=input_ids, attention_mask=attn, position_ids=positions, past_key_values=cache,
                        use_cache=True, logits_to_keep=1)  # the LM head only where the next token is sampled
        self.forward_calls += 1
        self.prefilled_tokens += sum(len(r) for r in rows_in)
        return out.past_key_values, attn, positions[:, -1] + 1, out.logits[:, -1, :]

    def forget(self, key: Hashable) -> None:
        self.kept.pop(key, None)

    # -- decoding -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, Completion]]:
        """Sample one token for every live row; return the rows that finished (and drop them from the batch)."""
        from evolvekit.llm.local import sample_next

        if not self.rows:
            return []
        p, llm = self.params, self.llm
        allowed = [r.trie.allowed() if r.trie is not None else None for r in self.rows]
        tok = sample_next(mask_logits(self.logits, allowed), p.temperature, p.top_p, self.generator)
        lp = torch.log_softmax(self.logits.float(), dim=-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        keep: list[int] = []
        done: list[tuple[Hashable, Completion]] = []
        for j, (t, l) in enumerate(zip(tok.tolist(), lp.tolist())):
            row = self.rows[j]
            row.tokens.append(t)
            row.logprobs.append(l)
            if row.trie is not None:
                row.trie = row.trie.advance(t)
            if t in llm.eos_ids:
                row.finish = "stop"
            elif p.stop and llm._stop_cut(row.tokens, p.stop) is not None:
                row.finish, row.stopped_on_string = "stop", True
            elif p.stop_on_balanced_json and balanced_json_end(
                    row.text_prefix + llm.tokenizer.decode(row.tokens, skip_special_tokens=True)):
                row.finish, row.stopped_on_json = "stop", True
            elif len(row.tokens) < p.max_new_tokens:
                keep.append(j)
                continue
            if self.keep_rows:
                self._keep(j, row)
            done.append((row.key, self._completion(row)))
        if len(keep) < len(self.rows):
            self._select(keep)
        if self.rows:
            tok = tok[torch.tensor(keep, device=tok.device)] if len(keep) < tok.shape[0] else tok
            self.attn = torch.cat([self.attn, torch.ones((len(self.rows), 1), dtype=self.attn.dtype,
                                                         device=self.attn.device)], dim=1)
            out = llm.model(input_ids=tok.unsqueeze(-1), attention_mask=self.attn,
                            position_ids=self.next_pos.unsqueeze(-1), past_key_values=self.cache, use_cache=True)
            self.forward_calls += 1
            self.cache, self.logits = out.past_key_values, out.logits[:, -1, :]
            self.next_pos = self.next_pos + 1
        return done

    def _keep(self, j: int, row: _Row) -> None:
        """Copy out row j's KV: its prompt and every completion token but the last (which was never fed)."""
        cols = self.attn[j].bool()
        self.kept[row.key] = (row.prompt + row.tokens[:-1],
                              [(layer.keys[j:j + 1][:, :, cols], layer.values[j:j + 1][:, :, cols])
                               for layer in self.cache.layers])

    def _select(self, keep: list[int]) -> None:
        self.rows = [self.rows[j] for j in keep]
        if not keep:
            self.cache = self.attn = self.next_pos = self.logits = None
            return
        idx = torch.tensor(keep, device=self.attn.device)
        self.cache.batch_select_indices(idx)
        self.attn, self.next_pos, self.logits = self.attn[idx], self.next_pos[idx], self.logits[idx]
        first = int((self.attn.sum(0) > 0).nonzero()[0])  # columns no live row attends to any more
        if first > 0:
            self.attn = self.attn[:, first:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]

    def _completion(self, row: _Row) -> Completion:
        from evolvekit.llm.local import LocalLLM

        toks = row.tokens
        body = toks[:-1] if toks and toks[-1] in self.llm.eos_ids else toks
        text = self.llm.tokenizer.decode(body, skip_special_tokens=True)
        if row.stopped_on_string:
            text = LocalLLM._cut_text(text, self.params.stop)
        elif row.stopped_on_json:  # the last token may carry a few characters past the JSON's end: drop them
            end = json_end_index(row.text_prefix + text)
            if end is not None:
                text = text[: max(end - len(row.text_prefix), 0)]
        return Completion(text=text, token_ids=list(toks), logprobs=list(row.logprobs), prompt_token_ids=row.prompt,
                          finish_reason=row.finish)

    def run(self) -> dict[Hashable, Completion]:
        """Decode until every row has finished."""
        out: dict[Hashable, Completion] = {}
        while self.rows:
            out.update(self.step())
        return out
