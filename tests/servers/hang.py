"""hang: a tool that never returns, to test client-side timeouts and cancellation.

* `hang()` awaits `anyio.sleep_forever()`: it answers only by being cancelled. A client that gives up
  (`read_timeout_seconds`, or cancelling the calling scope) sends `notifications/cancelled`; the server
  cancels the handler and the connection stays usable.
* `ok()` returns `"ok"`: call it after a timed-out `hang()` to show the connection still works.

    python tests/servers/hang.py                  # stdio
    python tests/servers/hang.py --http 8765      # streamable HTTP, http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import anyio
from _serve import serve
from mcp.server import MCPServer

mcp = MCPServer("hang", version="1.0.0", instructions="Test server: a tool that never returns.", log_level="WARNING")


@mcp.tool()
async def hang() -> str:
    """Never return (until the call is cancelled)."""
    await anyio.sleep_forever()
    return "unreachable"


@mcp.tool()
async def ok() -> str:
    """Return "ok"."""
    return "ok"


if __name__ == "__main__":
    serve(mcp)
