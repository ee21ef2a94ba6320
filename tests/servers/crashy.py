"""crashy: a server that dies in the middle of a call, to test errors and reconnecting after a crash.

* `crash()` ends the whole process with `os._exit(3)` while the call is in flight: no result, no
  JSON-RPC error, the pipe (or the HTTP server) just goes away. The client sees the connection close.
* `ok()` returns `"ok"`: call it on a fresh connection (a restarted process) to show recovery.
* `pid()` returns the server's process id, to tell a restarted process from the old one.

    python tests/servers/crashy.py                  # stdio
    python tests/servers/crashy.py --http 8765      # streamable HTTP (crash() kills the HTTP server too)
"""

from __future__ import annotations

import os
import sys

from _serve import serve
from mcp.server import MCPServer

mcp = MCPServer("crashy", version="1.0.0", instructions="Test server: crashes on demand.", log_level="WARNING")


@mcp.tool()
async def crash() -> str:
    """Kill this server process (exit status 3) before answering."""
    sys.stderr.write("crashy: crash() called, exiting with status 3\n")
    sys.stderr.flush()
    os._exit(3)


@mcp.tool()
async def ok() -> str:
    """Return "ok"."""
    return "ok"


@mcp.tool()
async def pid() -> int:
    """Return this server's process id."""
    return os.getpid()


if __name__ == "__main__":
    serve(mcp)
