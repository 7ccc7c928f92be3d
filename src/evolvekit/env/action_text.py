"""Parse tool calls out of model text.

Documented format (Hermes/Qwen style, which SmolLM2's chat data also uses)::

    <tool_call>{"name": "cd", "arguments": {"folder": "docs"}}</tool_call>

One or more blocks per message; the closing tag may be missing at the very end (generation stops on it). Without
any ``<tool_call>`` tag, a bare JSON object (or list of objects) with a ``name`` is accepted too. Text with no
call at all is a message to the user (it ends the turn). Text that tries to call but cannot be parsed yields a
``parse_error`` and no calls. Nothing here ever evaluates model text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from evolvekit.env.base import Action
from evolvekit.safejson import bracket_depth
from evolvekit.types import ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
MAX_DEPTH = 32  # JSON nesting of one call; deeper values cannot be stored or rendered safely
MAX_CHARS = 200_000  # one action's text
MAX_CANDIDATES = 64  # start positions tried for a bare JSON call
# a bare call starts as an object with a key, or a list of objects
_CANDIDATE = re.compile(r'\{\s*"|\[\s*\{\s*"')


def _to_call(obj: Any) -> ToolCall:
    if not isinstance(obj, dict):
        raise ValueError("a tool call must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a tool call needs a string 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        if bracket_depth(args) > MAX_DEPTH:
            raise ValueError(f"arguments nested deeper than {MAX_DEPTH}")
        args = json.loads(args)
    if not isinstance(args, dict):
        raise ValueError("'arguments' must be a JSON object")
    return ToolCall(name=name, arguments=args)


def _calls_from_json(text: str) -> list[ToolCall]:
    obj = json.loads(text)
    items = obj if isinstance(obj, list) else [obj]
    return [_to_call(o) for o in items]


def _first_json(text: str) -> Any | None:
    """The first JSON object (or list of objects) in ``text`` found by a real JSON decoder, else None.

    Only positions that can start a call (``{"`` or ``[{"``) are tried, at most ``MAX_CANDIDATES`` of them."""
    decoder = json.JSONDecoder()
    for n, match in enumerate(_CANDIDATE.finditer(text)):
        if n >= MAX_CANDIDATES:
            break
        try:
            value, _ = decoder.raw_decode(text, match.start())
            return value
        except ValueError:
            continue
    return None


def parse_action(text: str) -> Action:
    """Parse one model message; never raises, whatever ``text`` is."""
    if len(text) > MAX_CHARS:
        return Action(text=text, parse_error=f"message longer than {MAX_CHARS} characters")
    if bracket_depth(text) > MAX_DEPTH:
        return Action(text=text, parse_error=f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return _parse(text)
    except (ValueError, TypeError, RecursionError) as err:  # defence in depth: the bounds above prevent these
        return Action(text=text, parse_error=f"unparseable tool call: {type(err).__name__}")


def _parse(text: str) -> Action:
    if OPEN in text:
        calls: list[ToolCall] = []
        for block in _BLOCK.findall(text):
            block = block.strip()
            if not block:
                continue
            try:
                calls.extend(_calls_from_json(block))
            except (ValueError, TypeError) as err:
                return Action(text=text, parse_error=f"invalid tool call JSON: {err}")
        if not calls:
            return Action(text=text, parse_error="empty <tool_call> block")
        return Action(text=text, tool_calls=calls)
    value = _first_json(text)
    if value is None:
        return Action(text=text)  # a plain message: ends the user turn
    items = value if isinstance(value, list) else [value]
    if items and all(isinstance(o, dict) and "name" in o for o in items):
        try:
            return Action(text=text, tool_calls=[_to_call(o) for o in items])
        except (ValueError, TypeError) as err:
            return Action(text=text, parse_error=f"invalid tool call: {err}")
    return Action(text=text)


def format_call(call: ToolCall) -> str:
    return f"{OPEN}{json.dumps({'name': call.name, 'arguments': call.arguments})}{CLOSE}"
