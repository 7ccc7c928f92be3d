"""Linear, non-recursive checks on JSON text and values from outside (model text, request bodies, task files).

A leaf module: the parser, the environment service and the task-file loaders share it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from evolvekit.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


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


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")


def surely_shallow(raw: bytes, limit: int) -> bool:
    """True when the JSON text ``raw`` cannot nest deeper than ``limit``, decided in C-speed passes without decoding:
    keep only the brackets, then remove the empty pairs ``[]``/``{}`` once per level; if at most ``limit`` passes
    leave nothing, no pair is nested deeper. False means "maybe deeper" (brackets inside strings can interleave with
    the structure's): the exact check is then ``json_depth_path`` on the decoded value."""
    rest = raw.translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not rest:
            return True
        rest = _EMPTY_PAIR.sub(b"", rest)
    return not rest


def json_depth_path(value: Any, limit: int) -> str | None:
    """The dotted path of the first container nested deeper than ``limit`` in a decoded JSON value, else None.

    Iterative (no recursion, whatever the depth). Only containers are visited and no path is built until one is
    found too deep, so a wide body of scalars (30,000 tool calls) costs one pass over its containers."""
    if not isinstance(value, (dict, list)):
        return None
    if limit < 1:
        return "(root)"
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return _path_to_depth(value, limit + 1)
                stack.append((child, depth + 1))
    return None


def _path_to_depth(value: Any, depth: int) -> str:
    """The dotted path of the first container at nesting ``depth`` (at least 2) found depth-first (one exists)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, d, path = stack.pop()
        if d == depth:
            return (path[:80] + "...") if len(path) > 80 else path
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((v, d + 1, f"{path}.{k}" if path else str(k)) for k, v in items if isinstance(v, (dict, list)))
    raise AssertionError("no container at that depth")  # pragma: no cover - the caller found one


def read_jsonl(
    path: str | Path,
    model: type[M],
    what: str,
    max_bytes: int | None = None,
    max_items: int | None = None,
    max_line_bytes: int | None = None,
) -> list[M]:
    """Every line of a JSONL file as ``model``, all validated before any is returned (so a bad file changes
    nothing). A missing file, bytes that are not UTF-8, or a line that is not a ``what`` is a ``ConfigError`` of
    one line naming the file and the line. The caps bound the work: the file's size (checked before it is read),
    its number of items and one line's size (checked before any line is validated)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no such file: {p}")
    if max_bytes is not None and (size := p.stat().st_size) > max_bytes:
        raise ConfigError(f"{p}: {size / 2**20:.0f} MiB, over the {max_bytes / 2**20:.0f} MiB one file may hold")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: not UTF-8 text (byte {err.start}); expected JSON lines") from None
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror}") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if max_items is not None and len(lines) > max_items:
        raise ConfigError(f"{p}: {len(lines)} lines, more than the {max_items} one file may hold")
    out = []
    for n, line in lines:
        if max_line_bytes is not None and len(line) > max_line_bytes:  # characters: at most as many as its bytes
            raise ConfigError(f"{p}:{n}: over {max_line_bytes // 2**10} KiB on one line; not {what}")
        try:
            out.append(model.model_validate_json(line))
        except ValidationError as err:
            first = err.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise ConfigError(f"{p}:{n}: not {what}: {loc + ': ' if loc else ''}{first['msg'][:160]}") from None
        except (ValueError, RecursionError) as err:
            raise ConfigError(f"{p}:{n}: not {what}: {type(err).__name__}") from None
    return out
