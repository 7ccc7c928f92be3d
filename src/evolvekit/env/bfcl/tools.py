"""Tool schemas, argument validation, safe call strings and the compact one-line rendering."""

from __future__ import annotations

import json
import math
from typing import Any

from evolvekit.env.base import ToolSchema
from evolvekit.types import ToolCall

_TYPE_NAMES = {
    "string": "str",
    "integer": "int",
    "float": "float",
    "boolean": "bool",
    "array": "list",
    "dict": "dict",
    "tuple": "list",
    "any": "any",
    # JSON Schema's own names (MCP servers, plugins)
    "number": "float",
    "object": "dict",
    "null": "null",
}


def type_name(spec: Any) -> str:
    """A parameter schema's type as the compact rendering shows it: ``{"type": ["string", "null"]}`` (legal JSON
    Schema) -> ``str|null``; a missing, unknown or malformed type -> ``any``."""
    typ = spec.get("type", "any") if isinstance(spec, dict) else "any"
    if isinstance(typ, list):
        names = [_TYPE_NAMES.get(t, "any") if isinstance(t, str) else "any" for t in typ[:8]]
        return "|".join(dict.fromkeys(names)) or "any"
    return _TYPE_NAMES.get(typ, "any") if isinstance(typ, str) else "any"


def doc_to_schema(doc: dict) -> ToolSchema:
    return ToolSchema(name=doc["name"], description=doc.get("description", ""), parameters=doc.get("parameters", {}))


def _type_ok(value: Any, typ: Any) -> bool:
    if isinstance(typ, list):  # JSON Schema's union of types: any one of them
        return any(_type_ok(value, t) for t in typ)
    if typ == "null":
        return value is None
    if typ == "number":
        typ = "float"
    if typ == "object":
        typ = "dict"
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ in ("array", "tuple"):
        return isinstance(value, list)
    if typ == "dict":
        return isinstance(value, dict)
    return True


def validate_call(call: ToolCall, schema: ToolSchema) -> tuple[str | None, list[str]]:
    """Check a call against its schema: ``(error, warnings)``.

    Unknown or missing arguments are errors (the call is not executed). A value of the wrong JSON type is a
    *warning*: the official BFCL executor runs such calls as they are, and BFCL's own ground truth contains some
    (e.g. ``close_ticket(ticket_id='ticket_001')`` against an integer schema), so blocking them would make the
    benchmark disagree with itself. Warnings are shown in the observation and counted by the format reward.
    """
    props: dict[str, Any] = schema.parameters.get("properties", {})
    props = props if isinstance(props, dict) else {}
    listed = schema.parameters.get("required", [])
    required = [r for r in listed if isinstance(r, str)] if isinstance(listed, list) else []
    unknown = [k for k in call.arguments if k not in props]
    if unknown:
        return f"unknown argument(s) {unknown} for {call.name}; expected some of {list(props)}", []
    missing = [k for k in required if k not in call.arguments]
    if missing:
        return f"missing required argument(s) {missing} for {call.name}", []
    warnings = []
    for key, value in call.arguments.items():
        spec = props[key] if isinstance(props[key], dict) else {}
        typ = spec.get("type", "any")
        if not _type_ok(value, typ):
            warnings.append(f"argument '{key}' of {call.name} should be {type_name(spec)}, got {type(value).__name__}")
        elif "enum" in spec and value not in spec["enum"]:
            warnings.append(f"argument '{key}' of {call.name} should be one of {spec['enum']}")
    return None, warnings


# Bounds on the arguments of every executed call (see docs/environments.md, "Security model"). A BFCL backend is
# plain Python working on its arguments, so with these bounds each call costs at most linear time in a bounded
# input — except where the cost grows with an argument's *value*, which the per-tool rules below cap. The audit
# that found those rules, and the sweep that checks every tool of every backend under adversarial values, is
# tests/cpu/test_hostile.py::test_every_bfcl_tool_returns_quickly_on_extreme_arguments.
MAX_INT = 2**53  # JSON's exactly representable integers; nothing in BFCL needs more
MAX_STRING = 10_000
MAX_ITEMS = 1_000  # elements of one list / keys of one object
MAX_NESTING = 16
MAX_PRECISION = 1_000  # digits asked of mpmath / decimal (logarithm, square_root)
MAX_RESULT_DIGITS = 1_000  # power: |base| ** exponent


def _bound_value(value: Any, depth: int = 1) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if -MAX_INT <= value <= MAX_INT else "integer outside ±2**53"
    if isinstance(value, float):
        return None if math.isfinite(value) else "number is not finite"
    if isinstance(value, str):
        return None if len(value) <= MAX_STRING else f"string longer than {MAX_STRING} characters"
    if isinstance(value, (list, dict)):
        if depth > MAX_NESTING:
            return f"value nested deeper than {MAX_NESTING}"
        if len(value) > MAX_ITEMS:
            return f"more than {MAX_ITEMS} items"
        items = value.values() if isinstance(value, dict) else value
        return next((p for v in items if (p := _bound_value(v, depth + 1)) is not None), None)
    return f"unsupported value of type {type(value).__name__}"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _cost_problem(call: ToolCall) -> str | None:
    """Per-tool caps where a backend's cost grows with an argument's value, not its size (BFCL's MathAPI)."""
    args = call.arguments
    if call.name == "power":
        base, exponent = _number(args.get("base")), _number(args.get("exponent"))
        if base is not None and exponent is not None and abs(base) > 1 and exponent > 0:
            if exponent * math.log10(abs(base)) > MAX_RESULT_DIGITS:
                return f"the result would have more than {MAX_RESULT_DIGITS} digits"
    if call.name in ("logarithm", "square_root"):
        precision = _number(args.get("precision"))
        if precision is not None and precision > MAX_PRECISION:
            return f"precision above {MAX_PRECISION} digits"
    return None


def bound_call(call: ToolCall) -> str | None:
    """Why ``call`` may not run (its arguments are out of bounds or too costly to execute), or None."""
    for key, value in call.arguments.items():
        problem = _bound_value(value)
        if problem is not None:
            return f"argument '{key}' of {call.name}: {problem}"
    return _cost_problem(call)


def _is_json_literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(_is_json_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_literal(v) for k, v in value.items())
    return False


def call_string(call: ToolCall) -> str:
    """Render a validated call in BFCL's keyword form, e.g. ``cd(folder='docs')``.

    Only identifiers and JSON literals ever reach the string, so it is safe for the official checker (which
    evaluates these strings in its own namespace).
    """
    if not call.name.isidentifier():
        raise ValueError(f"tool name {call.name!r} is not an identifier")
    parts = []
    for key, value in call.arguments.items():
        if not key.isidentifier() or not _is_json_literal(value):
            raise ValueError(f"argument {key!r} of {call.name} is not a JSON literal keyword argument")
        parts.append(f"{key}={value!r}")
    return f"{call.name}({', '.join(parts)})"


def render_compact(tools: list[ToolSchema], max_desc: int = 80) -> str:
    """One line per tool: ``name(a: int, b?: str) - short description``."""
    lines = []
    for t in tools:
        props = t.parameters.get("properties", {})
        props = props if isinstance(props, dict) else {}
        listed = t.parameters.get("required", [])
        required = {r for r in listed if isinstance(r, str)} if isinstance(listed, list) else set()
        params = ", ".join(f"{k}{'' if k in required else '?'}: {type_name(v)}" for k, v in props.items())
        desc = t.description.split("Tool description:", 1)[-1].strip()
        if len(desc) > max_desc:
            desc = desc[: max_desc - 3].rstrip() + "..."
        lines.append(f"{t.name}({params}) - {desc}")
    return "\n".join(lines)


def render_json(tools: list[ToolSchema]) -> str:
    return "\n".join(json.dumps(t.model_dump()) for t in tools)


def stringify_result(result: Any) -> str:
    """Turn a backend's return value into observation text the way BFCL's executor does (never raises: an
    integer over Python's 4,300-digit ``str()`` limit, say, becomes an error text)."""
    try:
        if isinstance(result, str):
            return result
        if isinstance(result, dict):
            try:
                return json.dumps(result)
            except (TypeError, ValueError):
                return str(result)
        return str(result)
    except (ValueError, RecursionError) as err:
        return f"Error: the result cannot be shown ({type(err).__name__}: {str(err)[:120]})"
