"""Constrained decoding for the local backend's decode batch: a choice among known strings (a tool name), and a
JSON object under a JSON schema (a tool's arguments).

A constraint is any object with ``allowed() -> list[int]`` (the tokens the row may sample next) and
``advance(token) -> constraint | None`` (the constraint for the next token; None once it is satisfied, and the row
decodes freely from there). While a row carries one, its logits are masked to the allowed tokens before sampling:
the model still chooses, with its own probabilities, but only among valid continuations — grammar-constrained
decoding as served engines offer it (guided choice, guided JSON).

- ``TokenTrie`` holds the token sequences of the allowed strings; a completed sequence may hand over to a next
  constraint (``then``), e.g. the chosen tool's argument schema.
- ``SchemaConstraint`` decodes one JSON value under a JSON schema with lm-format-enforcer's character-level
  parser, walked over the tokenizer's vocabulary.
- ``NumberConstraint`` lets free text through but allows only given numbers in it (the synthesizer's requests).

Both are used by the explorer scaffold, so that a small model names a real tool and writes arguments the tool
accepts (a 135M explorer at T = 1 otherwise writes `{"username": 1a}` or invents argument names).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

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


def json_schema(schema: dict, max_string_length: int | None = None) -> dict:
    """A tool's parameter schema as standard JSON Schema: type aliases mapped, an object with declared properties
    closed to others (the environment rejects unknown arguments anyway), and — with ``max_string_length`` — every
    string without a ``maxLength`` capped (a sampled string otherwise runs on to the token limit)."""
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("properties", "items", "default")}
    if isinstance(out.get("type"), str):
        out["type"] = _TYPE_ALIASES.get(out["type"], out["type"])
        if out["type"] == "any":
            del out["type"]
    if max_string_length is not None and out.get("type") == "string" and "enum" not in out:
        out.setdefault("maxLength", max_string_length)
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: json_schema(v, max_string_length) for k, v in schema["properties"].items()}
        out.setdefault("additionalProperties", False)
    if "items" in schema:
        out["items"] = json_schema(schema["items"], max_string_length)
    if "required" in out and "properties" in out:
        out["required"] = [r for r in out["required"] if r in out["properties"]]
    return out


_NUMBER_CHARS = set("0123456789.eE+-")


class SchemaVocabulary:
    """The tokenizer's vocabulary prepared once for lm-format-enforcer (a prefix tree of every token's text)."""

    def __init__(self, tokenizer, eos_ids: Iterable[int]) -> None:
        from lmformatenforcer.tokenenforcer import TokenEnforcerTokenizerData

        zero = tokenizer.encode("0", add_special_tokens=False)[-1]
        special = set(tokenizer.all_special_ids)
        regular = []
        for i in range(len(tokenizer)):
            if i in special:
                continue
            # decoded after "0", so a token that starts a word keeps its leading space
            after = tokenizer.decode([zero, i])[1:]
            regular.append((i, after, len(after) > len(tokenizer.decode([i]))))
        self.text = {i: t for i, t, _ in regular}
        self.numeric = {i for i, t, _ in regular if t and t[0] in _NUMBER_CHARS}  # tokens that extend a number
        self.blank = {i for i, t, _ in regular if t and not t.strip()}  # whitespace-only tokens ("\n\t\t", "  ")
        # ... except one space: where a JSON writer puts a space (after ":" and ","), it is a small model's most
        # likely next token (0.78 after '"a":' for SmolLM2-135M); without it, the mass went to the allowed tokens
        # that start with a space, such as " -", and the explorer wrote almost only negative numbers
        self.space = {i for i, t, _ in regular if t == " "}
        # never in generated JSON: pieces of a multi-byte character (alone they decode to U+FFFD, and the parser,
        # which sees the decoded text, loses track of them: a dead end; whole-character tokens exist) and control
        # characters (invalid raw inside a JSON string, though the parser lets them in; JSON needs no whitespace)
        self.unsafe = {i for i, t, _ in regular if "\ufffd" in t or any(ord(ch) < 0x20 for ch in t)}
        self.eos = sorted(set(eos_ids))
        self.start = zero  # a one-token "prompt" the enforcer's states are keyed after
        self.data = TokenEnforcerTokenizerData(
            regular, lambda ids: tokenizer.decode(ids).rstrip("\ufffd"), self.eos, False, len(tokenizer)
        )


class SchemaConstraint:
    """One JSON value under a JSON schema; when it is complete, the constraint ``then`` makes follows (or none).

    If the parser reaches a state with no allowed token (it should not), the constraint ends and the row decodes
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
        from lmformatenforcer import JsonSchemaParser, TokenEnforcer
        from lmformatenforcer.characterlevelparser import CharacterLevelParserConfig

        config = CharacterLevelParserConfig(max_consecutive_whitespaces=1, max_json_array_length=max_array_length)
        self.enforcer = TokenEnforcer(
            vocab.data, JsonSchemaParser(json_schema(schema, max_string_length), config=config)
        )
        self.vocab, self.then, self.max_number_length = vocab, then, max_number_length
        self.seq = [vocab.start]
        self.number_run = 0  # number characters at the end of the text so far (outside strings)
        self.in_string, self.escaped = False, False
        self.after_comma = False  # the last character outside strings, spaces aside, is a comma
        self.after_space = False  # the last character is a space outside strings (one space at a time)
        self._allowed = self._compute()

    def _compute(self) -> list[int]:
        return list(self.enforcer.get_allowed_tokens(self.seq).allowed_tokens)

    def allowed(self) -> list[int]:
        # no whitespace-only token but a single space (a run of newlines and tabs is a sampled dead end; JSON needs
        # no whitespace, but a small model puts a space after ":" and ","); no pieces of a multi-byte character,
        # no control characters (see SchemaVocabulary.unsafe)
        v = self.vocab
        out = [
            t for t in self._allowed if t not in v.eos and (t not in v.blank or t in v.space) and t not in v.unsafe
        ] or [t for t in self._allowed if t not in v.eos]
        if self.after_comma and not self.in_string:  # no trailing comma (the parser lets "6 , }" through)
            out = [t for t in out if v.text.get(t, "").lstrip()[:1] not in ("}", "]")] or out
        if self.after_space and not self.in_string:  # the parser lets "  -" through
            out = [t for t in out if not v.text.get(t, " ")[:1].isspace()] or out
        if self.number_run and not self.in_string:
            # inside a number: no exponent (lm-format-enforcer lets an integer take one, and 806001E07175 is inf),
            # and once it is long enough it ends here (JSON allows any length)
            plain = [t for t in out if self.vocab.text.get(t, "")[:1] not in ("e", "E")]
            if self.number_run >= self.max_number_length:
                plain = [t for t in plain if t not in self.vocab.numeric]
            return plain or out
        return out

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
        self._allowed = self._compute()
        if any(t in self.vocab.eos for t in self._allowed):  # the value is complete
            return self.then() if self.then is not None else None
        if not self._allowed:
            log.debug("schema constraint reached a dead end after %r; decoding freely", self.seq[1:])
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
