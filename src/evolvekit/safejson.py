"""Linear, non-recursive checks on JSON text and values from outside (model text, request bodies, task files).

A leaf module: the parser, the environment service and the task-file loaders share it.
"""

from __future__ import annotations

from typing import Any


def bracket_depth(text: str) -> int:
    """The deepest nesting of ``{``/``[`` in ``text`` (one linear pass; an upper bound for any JSON value in it,
    since brackets inside strings are counted too)."""
    depth = deepest = 0
    for ch in text:
        if ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]" and depth:
            depth -= 1
    return deepest


def json_depth_path(value: Any, limit: int) -> str | None:
    """The dotted path of the first container nested deeper than ``limit`` in a decoded JSON value, else None.

    Iterative (no recursion, whatever the depth)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return (path[:80] + "...") if len(path) > 80 else (path or "(root)")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((v, depth + 1, f"{path}.{k}" if path else str(k)) for k, v in items)
    return None
