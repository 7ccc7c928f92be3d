"""System prompt for tool-using policies."""

from __future__ import annotations

from evolvekit.env.base import ToolSchema
from evolvekit.env.bfcl.tools import render_compact, render_json

SYSTEM_TEMPLATE = """You are an agent that solves the user's request by calling tools.
Available tools:
{tools}

To call a tool, answer with exactly one line:
<tool_call>{{"name": "TOOL_NAME", "arguments": {{"ARG": VALUE}}}}</tool_call>
You will then see the tool result. When the request is fully done, answer with a short message and no tool call."""


def system_prompt(tools: list[ToolSchema], rendering: str = "compact") -> str:
    text = render_compact(tools) if rendering == "compact" else render_json(tools)
    return SYSTEM_TEMPLATE.format(tools=text)
