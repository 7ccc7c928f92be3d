"""Linear, non-recursive checks on JSON text and values from outside (model text, request bodies, task files).

A leaf module: the parser, the environment service and the task-file loaders share it.
"""

from __future__ import annotations

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


def read_jsonl(path: str | Path, model: type[M], what: str) -> list[M]:
    """Every line of a JSONL file as ``model``, all validated before any is returned (so a bad file changes
    nothing). A missing file, bytes that are not UTF-8, or a line that is not a ``what`` is a ``ConfigError`` of
    one line naming the file and the line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no such file: {p}")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: not UTF-8 text (byte {err.start}); expected JSON lines") from None
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(model.model_validate_json(line))
        except ValidationError as err:
            first = err.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise ConfigError(f"{p}:{n}: not {what}: {loc + ': ' if loc else ''}{first['msg'][:160]}") from None
        except (ValueError, RecursionError) as err:
            raise ConfigError(f"{p}:{n}: not {what}: {type(err).__name__}") from None
    return out
