"""Continuous batching for the local backend: rows join and leave between decode steps.

A lock-step batch waits for its slowest row: rows that stopped early leave the batch, and the few left decode
at almost the cost of a full batch (a 135M model on CPU is bound by weight reads, not by rows). Here a caller
adds rows whenever it has prompts (a rollout whose tool call just finished, a new episode) and calls ``step()``;
every step runs one forward and samples one token for every live row, drops the rows that finished and returns
their completions, so the batch stays full while there is work.

Every row keeps its own KV (llm/ragged.py): a step packs the new tokens of all rows into one ragged forward, so
the prompts of joining rows are prefilled in the same pass over the weights as the other rows' decoding, and
nothing is padded, merged or re-indexed when rows join or leave. Prompts starting with the backend's cached shared
prefix (system prompt, tools, worked examples) prefill only their own suffix; with ``keep_rows`` an episode's next
turn prefills only its new tokens.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Hashable, Protocol, Sequence

import torch

from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.llm.constrain import TokenTrie, mask_logits
from evolvekit.llm.ragged import KVSlots, RowCopy, ragged_forward
from evolvekit.llm.sampling import Generators, common_prefix_len, cut_at_stops, sample_next


class BatchModel(Protocol):
    """What a continuous batch needs of its in-process model (``llm.local.LocalLLM`` is one): the torch model and
    tokenizer, the end-of-sequence ids, the shared-prefix KV cache and the stop-string check."""

    model: Any
    tokenizer: Any
    eos_ids: set[int]

    def shared_prefix_len(self, rows: Sequence[Sequence[int]]) -> int: ...

    def prefix_kv(self, prefix: tuple[int, ...]) -> Any: ...

    def stop_hit(self, tokens: list[int], stops: tuple[str, ...]) -> int | None: ...


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


_TAG = "<tool_call>"


class JsonEndScanner:
    """``json_end_index(text) is not None`` for a text that grows piece by piece, in time linear in its length: the
    scanner keeps its place (lead-in, bracket depth, inside a string, escape) instead of rescanning every step."""

    def __init__(self) -> None:
        self.lead = ""  # text before the JSON starts (whitespace, an optional <tool_call> tag)
        self.phase = "lead"  # lead -> body -> done, or none (the text does not start with JSON)
        self.depth, self.in_str, self.esc = 0, False, False

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def feed(self, piece: str) -> bool:
        """Take the next piece of text; True once the leading JSON value is complete."""
        i = 0
        while i < len(piece) and self.phase in ("lead", "body"):
            if self.phase == "lead":
                self.lead += piece[i]
                i += 1
                body = self.lead.lstrip()
                if body.startswith(_TAG):
                    body = body[len(_TAG) :].lstrip()
                elif _TAG.startswith(body):
                    continue  # whitespace, or a tag still being written
                if not body:
                    continue
                if body[0] not in "{[":
                    self.phase = "none"
                    break
                self.phase = "body"
                rest = body + piece[i:]  # the first bracket onward is the body
                i, piece = 0, rest
                continue
            ch = piece[i]
            i += 1
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif ch == "\\":
                    self.esc = True
                elif ch == '"':
                    self.in_str = False
            elif ch == '"':
                self.in_str = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.phase = "done"
        return self.done


class StreamDetokenizer:
    """New text of a growing token list, decoding only a short window per token (the offsets scheme of streaming
    servers): a token that ends inside a multi-byte character yields its text once the character is complete."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.prefix_offset = self.read_offset = 0

    def delta(self, tokens: Sequence[int]) -> str:
        prefix = self.tokenizer.decode(tokens[self.prefix_offset : self.read_offset], skip_special_tokens=True)
        full = self.tokenizer.decode(tokens[self.prefix_offset :], skip_special_tokens=True)
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(tokens)
            return full[len(prefix) :]
        return ""


@dataclass
class _Row:
    key: Hashable
    prompt: list[int]
    pending: list[int]  # tokens to feed at the next forward: the prompt's unprefilled tail, then each sampled token
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = "length"
    stopped_on_string: bool = False
    stopped_on_json: bool = False
    text_prefix: str = ""  # text already in the prompt that the completion continues (stop checks see both)
    trie: TokenTrie | None = None  # while set, sampling is restricted to this node's children (llm/constrain.py)
    json_scan: JsonEndScanner | None = None  # the balanced-JSON stop check, fed incrementally
    detok: StreamDetokenizer | None = None


def row_seed(seed: int, key: Hashable) -> int:
    """A 63-bit seed for one row's sampling stream, stable across processes (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{key!r}".encode()).digest()[:8], "little") >> 1


class DecodeBatch:
    """Live rows of one sampling configuration, each with its own KV (see the module docstring)."""

    def __init__(
        self, llm: BatchModel, params: SamplingParams, generator: torch.Generator | None = None, keep_rows: bool = False
    ) -> None:
        self.llm, self.params = llm, params
        # keep_rows: a finished row's KV (prompt + completion) is kept under its key, so when the same key comes
        # back with a longer prompt (the next turn of an episode) only the new tokens are prefilled; forget(key).
        self.keep_rows = keep_rows
        self.kept: dict[Hashable, tuple[list[int], RowCopy]] = {}
        self.prefilled_tokens = 0  # prompt tokens scheduled for prefill (not served from a reused KV)
        # An explicit generator is one stream for every row. Otherwise, with params.seed, each key gets its own
        # stream (seeded from the seed and the key, kept across an episode's turns until forget(key)): a rollout
        # samples the same tokens whichever rollouts share its batch, so batched and sequential runs agree.
        self.generator = generator
        self._row_generators: dict[Hashable, torch.Generator] = {}
        self.rows: list[_Row] = []  # row i's KV is slot i of self.slots
        self.slots = KVSlots()
        self.forward_calls = 0

    def __len__(self) -> int:
        return len(self.rows)

    # -- joining ------------------------------------------------------------------------------------------
    def add(
        self,
        items: Sequence[tuple[Hashable, Sequence[int]]],
        text_prefixes: Sequence[str] | None = None,
        constraints: Sequence[TokenTrie | None] | None = None,
    ) -> None:
        """Add ``(key, prompt ids)`` rows; their prompts are prefilled by the next ``step()``, in the same forward
        as the other rows' decoding.

        Each row starts from the longest KV it can reuse: its own kept KV (an episode's previous turn) or the
        backend's shared prefix (system prompt, tools, worked examples). ``text_prefixes``: per row, the start of
        the reply that the prompt already contains (a response prefix such as an opened tool call); the
        balanced-JSON stop checks prefix + completion. ``constraints``: per row, a ``TokenTrie`` its first tokens
        must follow (a choice among known strings), or None.
        """
        if not items:
            return
        prompts = [list(p) for _, p in items]
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt")
        llm = self.llm
        shared = llm.shared_prefix_len(prompts)
        entry = llm.prefix_kv(tuple(prompts[0][:shared])) if shared else None
        prefixes = list(text_prefixes) if text_prefixes is not None else [""] * len(items)
        tries = list(constraints) if constraints is not None else [None] * len(items)
        for (key, _), p, x, c in zip(items, prompts, prefixes, tries):
            kept = self.kept.pop(key, None)
            own = min(common_prefix_len([kept[0], p]), len(p) - 1) if kept is not None else 0
            if kept is not None and own > shared:
                n = own
                self.slots.append_copy(kept[1], n)  # the kept positions past the common prefix are not copied
            else:
                n = shared
                if n and entry is not None and (len(items) > 1 or self.rows):
                    self.slots.append_shared(entry, n)  # read once per step for all its rows (cascade attention)
                else:
                    self.slots.append(entry, n)  # a row alone reads it as fast from its own copy
            self.prefilled_tokens += len(p) - n
            if self.params.seed is not None and key not in self._row_generators:
                self._row_generators[key] = torch.Generator(device="cpu").manual_seed(row_seed(self.params.seed, key))
            self.rows.append(_Row(key=key, prompt=p, pending=p[n:], text_prefix=x, trie=c))

    def forget(self, key: Hashable) -> None:
        self.kept.pop(key, None)
        self._row_generators.pop(key, None)

    # -- decoding -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, Completion]]:
        """One forward over every row's pending tokens (new prompts and last sampled tokens), then one sampled
        token per row; return the rows that finished (and drop them from the batch)."""
        if not self.rows:
            return []
        p, llm = self.params, self.llm
        logits = ragged_forward(llm.model, self.slots, [r.pending for r in self.rows])
        self.forward_calls += 1
        allowed = [r.trie.allowed() if r.trie is not None else None for r in self.rows]
        gens: Generators = self.generator
        if gens is None and p.seed is not None:
            gens = [self._row_generators[r.key] for r in self.rows]
        tok = sample_next(mask_logits(logits, allowed), p.temperature, p.top_p, gens)
        lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        finished: list[int] = []
        done: list[tuple[Hashable, Completion]] = []
        for j, (row, t, logp) in enumerate(zip(self.rows, tok.tolist(), lp.tolist())):
            row.tokens.append(t)
            row.logprobs.append(logp)
            row.pending = [t]
            if row.trie is not None:
                row.trie = row.trie.advance(t)
            if t in llm.eos_ids:
                row.finish = "stop"
            elif p.stop and llm.stop_hit(row.tokens, p.stop) is not None:
                row.finish, row.stopped_on_string = "stop", True
            elif p.stop_on_balanced_json and self._json_complete(row):
                row.finish, row.stopped_on_json = "stop", True
            elif len(row.tokens) < p.max_new_tokens:
                continue
            if self.keep_rows:  # its prompt and every completion token but the last (which was never fed)
                self.kept[row.key] = (row.prompt + row.tokens[:-1], self.slots.extract(j))
            else:
                self._row_generators.pop(row.key, None)
            done.append((row.key, self._completion(row)))
            finished.append(j)
        for j in reversed(finished):  # the last row moves into the freed slot; mirror that on the row list
            self.slots.remove(j)
            last = self.rows.pop()
            if j < len(self.rows):
                self.rows[j] = last
        return done

    def _json_complete(self, row: _Row) -> bool:
        """The balanced-JSON stop check on the row's text so far, fed only the newly decoded characters."""
        if row.json_scan is None:
            row.json_scan, row.detok = JsonEndScanner(), StreamDetokenizer(self.llm.tokenizer)
            row.json_scan.feed(row.text_prefix)
        assert row.detok is not None
        return row.json_scan.feed(row.detok.delta(row.tokens))

    def _completion(self, row: _Row) -> Completion:
        toks = row.tokens
        body = toks[:-1] if toks and toks[-1] in self.llm.eos_ids else toks
        text = self.llm.tokenizer.decode(body, skip_special_tokens=True)
        if row.stopped_on_string:
            text = cut_at_stops(text, self.params.stop)
        elif row.stopped_on_json:  # the last token may carry a few characters past the JSON's end: drop them
            end = json_end_index(row.text_prefix + text)
            if end is not None:
                text = text[: max(end - len(row.text_prefix), 0)]
        return Completion(
            text=text,
            token_ids=list(toks),
            logprobs=list(row.logprobs),
            prompt_token_ids=row.prompt,
            finish_reason=row.finish,
        )

    def run(self) -> dict[Hashable, Completion]:
        """Decode until every row has finished."""
        out: dict[Hashable, Completion] = {}
        while self.rows:
            out.update(self.step())
        return out
