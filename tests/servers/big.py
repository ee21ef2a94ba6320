"""big: a server whose replies can be far larger than any host call may carry.

* `big_reply(size, shape="text")` answers about `size` bytes of JSON-RPC message:
  - `"text"`: one text block of `size` bytes of ASCII (`"x" * size`) and no structured copy, so the
    message is `size` bytes plus about 150 of envelope;
  - `"items"`: `structuredContent` `{"items": [{"n": 0}, {"n": 1}, ...]}` (and a short text block),
    as many small objects as fit in `size` bytes: cheap on the wire, expensive to parse (a client
    that parses it whole builds about a million Python objects for 12.5 MB).
* `small()` returns `"ok"`: call it after a refused big reply to show the connection still works.

Built on the lowlevel `Server`, so the reply is exactly one text block. The reply is built once per
size and kept, so the server's own memory does not grow with repeated calls.

    python tests/servers/big.py                                  # stdio
    python tests/servers/big.py --http 8765                      # streamable HTTP (replies as SSE events)
    python tests/servers/big.py --http 8765 --json-response      # streamable HTTP, plain JSON replies
"""

from __future__ import annotations

from functools import lru_cache

from _serve import serve
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

#: Far above any cap of the host; a test never needs more.
MAX_SIZE = 64 * 1024 * 1024

TOOLS = [
    Tool(
        name="big_reply",
        description="Answer one text block of `size` bytes.",
        input_schema={
            "type": "object",
            "properties": {
                "size": {"type": "integer", "minimum": 0, "maximum": MAX_SIZE},
                "shape": {"type": "string", "enum": ["text", "items"], "default": "text"},
            },
            "required": ["size"],
        },
    ),
    Tool(name="small", description='Return "ok".', input_schema={"type": "object", "properties": {}}),
]


@lru_cache(maxsize=4)
def _reply(size: int, shape: str) -> CallToolResult:
    if shape == "items":
        items, used = [], 0
        while used < size:
            item = {"n": len(items)}
            used += len(f'{{"n":{len(items)}}},')
            items.append(item)
        return CallToolResult(content=[TextContent(type="text", text=f"{len(items)} items")],
                              structured_content={"items": items})  # fmt: skip
    return CallToolResult(content=[TextContent(type="text", text="x" * size)])


async def list_tools(ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
    return ListToolsResult(tools=TOOLS)


async def call_tool(ctx: ServerRequestContext, params: CallToolRequestParams) -> CallToolResult:
    args = params.arguments or {}
    if params.name == "big_reply":
        size, shape = args.get("size"), args.get("shape", "text")
        if not isinstance(size, int) or not 0 <= size <= MAX_SIZE or shape not in ("text", "items"):
            message = "size must be 0..64 MiB and shape 'text' or 'items'"
            return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
        return _reply(size, shape)
    if params.name == "small":
        return CallToolResult(content=[TextContent(type="text", text="ok")])
    raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")


server = Server("big", version="1.0.0", instructions="Test server: huge replies.", on_list_tools=list_tools,
                on_call_tool=call_tool)  # fmt: skip

if __name__ == "__main__":
    serve(server)
