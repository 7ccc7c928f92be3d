"""A test-only MCP server over streamable HTTP (the SDK's MCPServer): one shared counter.

python tests/plugins/mcp_counter_server.py PORT
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("counter")
state = {"count": 0}


@server.tool()
def increment(by: int) -> str:
    """Add `by` to the counter."""
    state["count"] += by
    return f"count is now {state['count']}"


@server.tool()
def get_count() -> str:
    """The counter's value."""
    return f"count = {state['count']}"


@server.tool()
def reset() -> str:
    """Set the counter back to 0."""
    state["count"] = 0
    return "reset"


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
