"""A test-only "MCP server" that prints garbage to stdout forever (never a JSON-RPC message)."""

import sys
import time

while True:
    sys.stdout.write("this is not json-rpc {{{\n" * 50)
    sys.stdout.flush()
    time.sleep(0.01)
