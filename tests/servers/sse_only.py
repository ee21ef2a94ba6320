"""An MCP server that speaks only the legacy HTTP+SSE transport (2024-11-05), as older hosted servers do.

    python tests/servers/sse_only.py PORT

serves the event stream at http://127.0.0.1:PORT/sse (messages are posted to /messages/).
Tools: `add` and `flood` (a reply of `size` bytes, to test the per-event cap).
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("sse-only")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def flood(size: int) -> str:
    """Returns `size` bytes of text in one event."""
    return "x" * size


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(server.sse_app(), host="127.0.0.1", port=port, log_level="warning")
