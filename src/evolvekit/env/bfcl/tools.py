"""Tool schemas, argument validation, safe call strings and the compact one-line rendering."""

from __future__ import annotations

import json
from typing import Any

from evolvekit.env.base import ToolSchema
from evolvekit.types import ToolCall

_TYPE_NAMES = {"string": "str", "integer": "int", "float": "float", "boolean": "bool", "array": "list",
               "dict": "dict", "tuple": "list", "any": "any"}


def doc_to_schema(doc: dict) -> ToolSchema:
    return ToolSchema(name=doc["name"], description=doc.get("description", ""), parameters=doc.get("parameters", {}))


def _type_ok(value: Any, typ: str) -> bool:
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
    required = schema.parameters.get("required", [])
    unknown = [k for k in call.arguments if k not in props]
    if unknown:
        return f"unknown argument(s) {unknown} for {call.name}; expected some of {list(props)}", []
    missing = [k for k in required if k not in call.arguments]
    if missing:
        return f"missing required argument(s) {missing} for {call.name}", []
    warnings = []
    for key, value in call.arguments.items():
        spec = props[key]
        typ = spec.get("type", "any")
        if not _type_ok(value, typ):
            warnings.append(f"argument '{key}' of {call.name} should be {_TYPE_NAMES.get(typ, typ)}, got {type(value).__name__}")
        elif "enum" in spec and value not in spec["enum"]:
            warnings.append(f"argument '{key}' of {call.name} should be one of {spec['enum']}")
    return None, warnings


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
        required = set(t.parameters.get("required", []))
        params = ", ".join(f"{k}{'' if k in required else '?'}: {_TYPE_NAMES.get(v.get('type', 'any'), 'any')}"
                           for k, v in props.items())
        desc = t.description.split("Tool description:", 1)[-1].strip()
        if len(desc) > max_desc:
            desc = desc[: max_desc - 3].rstrip() + "..."
        lines.append(f"{t.name}({params}) - {desc}")
    return "\n".join(lines)


def render_json(tools: list[ToolSchema]) -> str:
    return "\n".join(json.dumps(t.model_dump()) for t in tools)


def stringify_result(result: Any) -> str:
    """Turn a backend's return value into observation text the way BFCL's executor does."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)
