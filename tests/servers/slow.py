"""slow: a tool that takes a while, to show that calls run concurrently.

`sleep_for(seconds: float)` awaits `anyio.sleep(seconds)` and returns `seconds` (structured output
`{"result": seconds}`, text `"0.5"`). It blocks nothing else: four `sleep_for(0.5)` calls issued together
on one connection all finish after about 0.5 s, well under the 2 s they would take one after another.
A call cancelled by the client (its scope cancelled, or `read_timeout_seconds` exceeded) stops sleeping.

    python tests/servers/slow.py                  # stdio
    python tests/servers/slow.py --http 8765      # streamable HTTP, http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import anyio
from _serve import serve
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("slow", version="1.0.0", instructions="Test server: a tool that sleeps.", log_level="WARNING")


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
async def sleep_for(seconds: float) -> float:
    """Sleep for `seconds` (without blocking other calls), then return `seconds`."""
    await anyio.sleep(seconds)
    return seconds


if __name__ == "__main__":
    serve(mcp)
