"""Constrained decoding for the local backend's decode batch: a choice among known strings (a tool name), and a
JSON object under a JSON schema (a tool's arguments).

A constraint is any object with ``allowed() -> list[int]`` (the tokens the row may sample next) and
``advance(token) -> constraint | None`` (the constraint for the next token; None once it is satisfied, and the row
decodes freely from there). While a row carries one, its logits are masked to the allowed tokens before sampling:
the model still chooses, with its own probabilities, but only among valid continuations — grammar-constrained
decoding as served engines offer it (guided choice, guided JSON).

- ``TokenTrie`` holds the token sequences of the allowed strings; a completed sequence may hand over to a next
  constraint (``then``), e.g. the chosen tool's argument schema.
- ``SchemaConstraint`` decodes one JSON value under a JSON schema with llguidance's grammar engine (a token mask
  per step, computed in Rust), with a few rules for small models on top.
- ``NumberConstraint`` lets free text through but allows only given numbers in it (the synthesizer's requests).

Both are used by the explorer scaffold, so that a small model names a real tool and writes arguments the tool
accepts (a 135M explorer at T = 1 otherwise writes `{"username": 1a}` or invents argument names).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

log = logging.getLogger(__name__)


@dataclass
class TokenTrie:
    children: dict[int, "TokenTrie"] = field(default_factory=dict)
    end: bool = False
    then: Callable[[], Any] | None = None  # at an end node: makes the constraint that follows the completed string

    @classmethod
    def build(
        cls, sequences: Iterable[Sequence[int]], thens: Sequence[Callable[[], Any] | None] | None = None
    ) -> "TokenTrie":
        """A trie of the allowed token sequences; ``thens[i]`` (optional) makes the constraint that follows
        sequence i once it is complete."""
        root = cls()
        for i, seq in enumerate(sequences):
            if not seq:
                raise ValueError("empty allowed sequence")
            node = root
            for tok in seq:
                node = node.children.setdefault(int(tok), cls())
            node.end = True
            node.then = thens[i] if thens is not None else None
        if not root.children:
            raise ValueError("no allowed sequences")
        return root

    def allowed(self) -> list[int]:
        return list(self.children)

    def advance(self, token: int):
        """The node after ``token``; once an allowed sequence is complete, the constraint that follows it (None:
        the constraint ends there).

        A token outside the trie (only possible if the caller did not mask) also ends the constraint."""
        node = self.children.get(int(token))
        if node is None:
            return None
        if node.end:
            return node.then() if node.then is not None else None
        return node


# tool-schema type names that are not JSON Schema (BFCL writes dict, float, tuple) and their JSON Schema names
_TYPE_ALIASES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "int": "integer",
    "str": "string",
    "bool": "boolean",
    "list": "array",
}


def json_schema(schema: dict, max_string_length: int | None = None, max_array_length: int | None = None) -> dict:
    """A tool's parameter schema as standard JSON Schema: type aliases mapped, an object with declared properties
    closed to others (the environment rejects unknown arguments anyway), and — with ``max_string_length`` and
    ``max_array_length`` — every string without a ``maxLength`` and every array without a ``maxItems`` capped (a
    sampled string or list otherwise runs on to the token limit)."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("properties", "items", "default")}
    if isinstance(out.get("type"), str):
        out["type"] = _TYPE_ALIASES.get(out["type"], out["type"])
        if out["type"] == "any":
            del out["type"]
    if max_string_length is not None and out.get("type") == "string" and "enum" not in out:
        out.setdefault("maxLength", max_string_length)
    if max_array_length is not None and out.get("type") == "array":
        out.setdefault("maxItems", max_array_length)
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {
            k: json_schema(v, max_string_length, max_array_length) for k, v in schema["properties"].items()
        }
        out.setdefault("additionalProperties", False)
    if "items" in schema:
        out["items"] = json_schema(schema["items"], max_string_length, max_array_length)
    if "required" in out and "properties" in out:
        out["required"] = [r for r in out["required"] if r in out["properties"]]
    return out


_NUMBER_CHARS = set("0123456789.eE+-")


class SchemaVocabulary:
    """The tokenizer's vocabulary prepared once: llguidance's view of it (the grammar engine), and, as boolean masks
    over the token ids, the token classes the constraint's own rules read."""

    def __init__(self, tokenizer, eos_ids: Iterable[int]) -> None:
        import llguidance.hf

        zero = tokenizer.encode("0", add_special_tokens=False)[-1]
        special = set(tokenizer.all_special_ids)
        self.size = len(tokenizer)
        # decoded after "0", so a token that starts a word keeps its leading space
        self.text = {i: tokenizer.decode([zero, i])[1:] for i in range(self.size) if i not in special}
        self.numeric = {i for i, t in self.text.items() if t and t[0] in _NUMBER_CHARS}  # tokens that extend a number
        self.blank = {i for i, t in self.text.items() if t and not t.strip()}  # whitespace-only ("\n\t\t", "  ")
        # ... except one space: where a JSON writer puts a space (after ":" and ","), it is a small model's most
        # likely next token (0.78 after '"a":' for SmolLM2-135M); without it, the mass went to the allowed tokens
        # that start with a space, such as " -", and the explorer wrote almost only negative numbers
        self.space = {i for i, t in self.text.items() if t == " "}
        # never in generated JSON: pieces of a multi-byte character (alone they decode to U+FFFD; whole-character
        # tokens exist) and control characters (invalid raw inside a JSON string; JSON needs no whitespace)
        self.unsafe = {i for i, t in self.text.items() if "\ufffd" in t or any(ord(ch) < 0x20 for ch in t)}
        self.eos = sorted(set(eos_ids))
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.size)
        self.eos_mask = self._mask(self.eos)
        # what a JSON value may be written with: regular tokens, no end token, no blank but the single space, nothing
        # unsafe (the grammar decides which of these may come next)
        self.usable = self._mask(self.text) & ~self._mask(self.blank - self.space) & ~self._mask(self.unsafe)
        self.numeric_mask = self._mask(self.numeric)
        self.exponent = self._mask(i for i, t in self.text.items() if t[:1] in ("e", "E"))
        self.closing = self._mask(i for i, t in self.text.items() if t.lstrip()[:1] in ("}", "]"))
        self.leading_space = ~self._mask(i for i, t in self.text.items() if not t[:1].isspace())

    def _mask(self, ids: Iterable[int]) -> np.ndarray:
        out = np.zeros(self.size, dtype=bool)
        out[np.fromiter(ids, dtype=np.int64)] = True
        return out


def _grammar(schema: dict) -> str:
    """The value as a Lark grammar for llguidance: one optional space, then JSON under ``schema``. The space is where
    a writer puts one after ``"arguments":`` (the scaffold's prefix ends there); lm-format-enforcer allowed it, and
    without it a 135M explorer, made to write ``{"`` straight after the colon, explored fewer distinct arguments.
    A schema keyword llguidance does not implement is ignored (``lenient``), not an error."""
    return f'start: " "? value\nvalue: %json {json.dumps({**schema, "x-guidance": {"lenient": True}})}'


class SchemaConstraint:
    """One JSON value under a JSON schema; when it is complete, the constraint ``then`` makes follows (or none).

    The grammar is llguidance's (the tool's schema as ``json_schema`` writes it, arrays capped at
    ``max_array_length`` items); on top of it come the rules for a small model (``allowed``). If no token is allowed
    (it should not happen) or an unmasked caller feeds a refused token, the constraint ends and the row decodes
    freely, logged at debug level."""

    def __init__(
        self,
        vocab: SchemaVocabulary,
        schema: dict,
        then: Callable[[], Any] | None = None,
        max_string_length: int | None = 64,
        max_array_length: int = 8,
        max_number_length: int = 12,
    ) -> None:
        import llguidance
        import llguidance.numpy

        grammar = llguidance.grammar_from("lark", _grammar(json_schema(schema, max_string_length, max_array_length)))
        self.matcher = llguidance.LLMatcher(vocab.tokenizer, grammar)
        if self.matcher.is_error():
            raise ValueError(f"the schema gives no grammar: {self.matcher.get_error()[:200]}")
        self.bits = llguidance.numpy.allocate_token_bitmask(1, vocab.tokenizer.vocab_size)
        self.vocab, self.then, self.max_number_length = vocab, then, max_number_length
        self.seq: list[int] = []
        self.number_run = 0  # number characters at the end of the text so far (outside strings)
        self.in_string, self.escaped = False, False
        self.after_comma = False  # the last character outside strings, spaces aside, is a comma
        self.after_space = False  # the last character is a space outside strings (one space at a time)
        self._allowed = self._compute()

    def _compute(self) -> np.ndarray:
        """The grammar's next-token mask (bit i of the bitmask: token i)."""
        import llguidance.numpy

        llguidance.numpy.fill_next_token_bitmask(self.matcher, self.bits, 0)
        return np.unpackbits(self.bits[0].view(np.uint8), bitorder="little")[: self.vocab.size].astype(bool)

    def mask(self) -> np.ndarray:
        """The tokens the row may sample next, as a boolean mask: the grammar's, less what a small model misuses.

        No whitespace-only token but a single space (a run of newlines and tabs is a sampled dead end; JSON needs no
        whitespace, but a small model puts a space after ":" and ","), no piece of a multi-byte character, no control
        character (``SchemaVocabulary``); outside strings no whitespace right after a space, no "}" or "]" right
        after a comma, no exponent inside a number, and a number ends once it has ``max_number_length``
        characters. A rule that would leave nothing allowed is not applied."""
        v = self.vocab
        out = self._allowed & v.usable
        if not out.any():
            out = self._allowed & ~v.eos_mask
        if self.in_string:
            return out
        for rule, refused in ((self.after_comma, v.closing), (self.after_space, v.leading_space)):
            if rule:
                kept = out & ~refused
                out = kept if kept.any() else out
        if self.number_run:
            plain = out & ~v.exponent
            if self.number_run >= self.max_number_length:
                plain &= ~v.numeric_mask
            out = plain if plain.any() else out
        return out

    def allowed(self) -> torch.Tensor:
        """``mask()`` as token ids (what the decode batch takes)."""
        return torch.from_numpy(np.flatnonzero(self.mask()))

    def advance(self, token: int):
        piece = self.vocab.text.get(int(token), "")
        for ch in piece:  # a JSON lexer's two facts: inside a string or not, and the number being written
            if self.escaped:
                self.escaped = False
            elif self.in_string and ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = not self.in_string
            if ch in _NUMBER_CHARS and not self.in_string:
                self.number_run += 1
            else:
                self.number_run = 0
            if ch == '"' or (not self.in_string and not ch.isspace()):
                self.after_comma = ch == "," and not self.in_string
            self.after_space = ch.isspace() and not self.in_string
        self.seq.append(int(token))
        if not self.matcher.consume_token(int(token)) or self.matcher.is_error():
            log.debug("schema constraint refused %d after %r; decoding freely", token, self.seq[:-1])
            return None
        self._allowed = self._compute()
        if self._allowed[self.vocab.eos_mask].any():  # the value is complete
            return self.then() if self.then is not None else None
        if not self._allowed.any():
            log.debug("schema constraint reached a dead end after %r; decoding freely", self.seq)
            return None
        return self


def number_strings(value) -> set[str]:
    """How a request may write a number: its digits with at most one decimal point (the sign is a separate word);
    a whole float also without its ".0" (8.0 -> "8", "8.0"); none for a number only an exponent writes (1e-05)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return set()
    forms = {str(abs(value))}
    if isinstance(value, float) and value.is_integer():
        forms.add(str(abs(int(value))))
    return {f for f in forms if f and all(ch.isdigit() or ch == "." for ch in f) and f.count(".") <= 1}


class NumberVocabulary:
    """The tokenizer's vocabulary sorted for ``NumberConstraint``: tokens that are digits only, the "." token(s),
    and every token without a digit (a token mixing digits with other characters, such as "1st", is never allowed
    under the constraint)."""

    def __init__(self, tokenizer, eos_ids: Iterable[int]) -> None:
        special = set(tokenizer.all_special_ids) - set(eos_ids)
        self.digits: dict[int, str] = {}
        self.dots: list[int] = []
        free: list[int] = []
        for i in range(len(tokenizer)):
            if i in special:
                continue
            text = tokenizer.decode([i])
            if text.isdigit() and text.isascii():
                self.digits[i] = text
            elif not any(ch.isdigit() for ch in text):
                free.append(i)
                if text == ".":
                    self.dots.append(i)
        self.free = torch.tensor(free, dtype=torch.long)
        # what may follow a full stop after a number: a token that starts with whitespace, or the end ("1." then
        # "amber" is a small model's 1.13 cut short by the constraint)
        eos = set(eos_ids)
        self.after_stop = torch.tensor(
            [i for i in free if i in eos or tokenizer.decode([i])[:1].isspace()], dtype=torch.long
        )
        self._cache: dict[tuple, torch.Tensor] = {}

    def tensor(self, free: bool, extra: tuple[int, ...]) -> torch.Tensor:
        """The allowed ids: every digit-free token (``free``) and ``extra``, as one cached tensor."""
        key = (free, extra)
        if key not in self._cache:
            ids = torch.tensor(extra, dtype=torch.long)
            self._cache[key] = torch.cat([self.free, ids]) if free else ids
        return self._cache[key]


class NumberConstraint:
    """Free text in which every number is one of ``numbers`` (strings from ``number_strings``): a digit may only
    continue a number towards an allowed one, and a number must be complete before any other token. The
    synthesizer's scaffold uses it so that a small model's request states its calls' own values and no other
    number (questioning.numbers_constrained). It never ends: the whole reply is constrained."""

    def __init__(self, vocab: NumberVocabulary, numbers: Iterable[str]) -> None:
        self.vocab = vocab
        self.complete = set(numbers)
        self.prefixes = {n[:k] for n in self.complete for k in range(1, len(n) + 1)}
        self.run = ""  # the number being written ("" between numbers)
        self.full_stop = False  # the last token was a "." right after a complete number: a space or the end follows

    def _ended(self) -> bool:
        """Another token may follow: no number is open, or the open one is complete (a trailing "." was the
        sentence's full stop)."""
        r = self.run
        return not r or r in self.complete or (r.endswith(".") and r[:-1] in self.complete)

    def allowed(self) -> torch.Tensor:
        v, r = self.vocab, self.run
        if self.full_stop:
            return v.after_stop
        digits = tuple(sorted(i for i, d in v.digits.items() if r + d in self.prefixes))
        dots = tuple(v.dots) if r and r + "." in self.prefixes else ()
        ended = self._ended()
        if not ended and not digits and not dots:  # cannot happen for prefixes of allowed numbers
            return v.tensor(True, ())
        return v.tensor(ended, digits + (() if ended else dots))

    def advance(self, token: int) -> "NumberConstraint":
        t = int(token)
        ended_number = bool(self.run) and self._ended()
        self.full_stop = False
        if t in self.vocab.digits:
            self.run += self.vocab.digits[t]
        elif t in self.vocab.dots and self.run and self.run + "." in self.prefixes:
            self.run += "."
        else:
            self.full_stop = t in self.vocab.dots and ended_number  # "25." then "3" would read as 25.3
            self.run = ""
        return self


def mask_logits(logits: torch.Tensor, allowed: Sequence[Sequence[int] | torch.Tensor | None]) -> torch.Tensor:
    """Rows with an allowed list keep only those logits (the rest -inf); rows with None are unchanged."""
    if all(a is None for a in allowed):
        return logits
    out = logits.clone()
    for j, ids in enumerate(allowed):
        if ids is not None:
            keep = torch.full_like(out[j], float("-inf"))
            idx = (
                ids.to(out.device)
                if isinstance(ids, torch.Tensor)
                else torch.tensor(list(ids), dtype=torch.long, device=out.device)
            )
            keep[idx] = out[j, idx]
            out[j] = keep
    return out
