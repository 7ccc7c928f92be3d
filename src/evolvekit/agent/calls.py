"""A tool call's identity after normalising its argument forms (grounded credit and grounded experiences)."""

from __future__ import annotations

import math
from typing import Any, Hashable

from evolvekit.types import ToolCall


def normalise(value: Any) -> Hashable:
    """A hashable canonical form of an argument value: numbers by value (3 = 3.0), strings stripped and
    case-folded, lists and objects element by element."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        f = float(value)
        return ("num", f if math.isfinite(f) else repr(f))
    if isinstance(value, str):
        return ("str", value.strip().casefold())
    if isinstance(value, (list, tuple)):
        return ("list", tuple(normalise(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), normalise(v)) for k, v in value.items())))
    return ("other", repr(value))


def call_key(call: ToolCall) -> Hashable:
    """A call's identity after normalising its argument forms."""
    return call.name, normalise(call.arguments)
