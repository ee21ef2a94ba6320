"""Shared entry point of the test servers: stdio by default, streamable HTTP with `--http PORT`.

Not a server itself. Each server script ends with `serve(server)`, which parses the command line:

    python tests/servers/<name>.py                     # stdio (the client spawns it)
    python tests/servers/<name>.py --http 8765         # streamable HTTP at http://127.0.0.1:8765/mcp
    python tests/servers/<name>.py --http 8765 --json-response   # the same, answering plain JSON, not SSE

`server` may be an `MCPServer` or a lowlevel `Server`; both serve the 2025 (initialize) and the
2026-07-28 (server/discover) protocol eras on either transport.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from mcp import stdio_server
from mcp.server import MCPServer, Server


async def _serve_stdio(server: MCPServer[Any] | Server[Any]) -> None:
    if isinstance(server, MCPServer):
        await server.run_stdio_async()
        return
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve(server: MCPServer[Any] | Server[Any], *, http: bool = True, argv: list[str] | None = None) -> None:
    """Run `server` on stdio, or on streamable HTTP when `--http PORT` is given (and `http` allows it)."""
    parser = argparse.ArgumentParser(description=f"MCP test server {server.name!r}")
    if http:
        parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on PORT (path /mcp)")
        parser.add_argument("--host", default="127.0.0.1", help="address to bind with --http (default 127.0.0.1)")
        parser.add_argument("--json-response", action="store_true", help="with --http: answer JSON, not SSE")
    args = parser.parse_args(argv)
    port = getattr(args, "http", None)
    if port is None:
        anyio.run(_serve_stdio, server)
        return

    import uvicorn

    app = server.streamable_http_app(host=args.host, json_response=args.json_response)
    uvicorn.run(app, host=args.host, port=port, log_level="warning")
