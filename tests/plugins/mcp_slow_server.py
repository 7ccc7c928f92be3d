"""A minimal MCP server over stdio (plain JSON-RPC lines) that answers every request after a delay, each inside a
per-message timeout, so that start-up as a whole takes several delays. It exits as soon as its input closes, even
while waiting. Usage: mcp_slow_server.py DELAY_S"""

import json
import os
import select
import sys
import time

delay = float(sys.argv[1])
buffer = b""


def wait(seconds: float) -> None:
    """Sleep, but exit at once when the client closes our input."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if select.select([0], [], [], left)[0] and not os.read(0, 1 << 16):
            sys.exit(0)


while True:
    while b"\n" not in buffer:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            sys.exit(0)
        buffer += chunk
    line, buffer = buffer.split(b"\n", 1)
    msg = json.loads(line)
    if "id" not in msg:  # a notification
        continue
    wait(delay)
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "slow", "version": "0"}}  # fmt: skip
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "noop", "inputSchema": {"type": "object", "properties": {}}}]}
    elif msg["method"] == "tools/call":
        result = {"content": [{"type": "text", "text": "done"}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
