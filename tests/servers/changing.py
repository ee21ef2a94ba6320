"""changing: a server whose tool list changes at run time, announced with tools/list_changed in both eras.

Tools:
* `add_tool(name)` registers a new tool `name` (it answers `"<name> called with <arguments JSON>"`), then
  announces the change. A name that is taken or not `^[A-Za-z0-9._-]{1,128}$` gives an `isError` result.
* `remove_tool(name)` removes a tool that `add_tool` added, then announces the change.
* `list_names()` returns the current tool names: text (a JSON list) and structured `{"names": [...]}`.

How the change is announced depends on the protocol era the calling connection negotiated:
* 2026-07-28 (`server/discover`, the default `Client(mode="auto")` against this server): there is no
  standing notification channel, so the event is published on the server's subscription bus and delivered
  to every open `subscriptions/listen` stream that asked for `toolsListChanged`. A client sees it only
  inside `client.listen(tools_list_changed=True)`. This is what `MCPServer`'s `ctx.notify_tools_changed()`
  does; here the lowlevel `Server` owns the bus and serves `subscriptions/listen` with `ListenHandler`.
* 2025-11-25 and older (`initialize`, `Client(mode="legacy")`): the connection sends
  `notifications/tools/list_changed`, which reaches the client's `message_handler` as a
  `ToolListChangedNotification`. It is `ctx.session.send_tool_list_changed()`, but sent as related to the
  `add_tool`/`remove_tool` request, so over streamable HTTP it rides that call's SSE response (before the
  result) instead of the standalone GET stream, which a client may not have opened yet. The SDK drops
  this notification on a 2026 connection (checked: nothing arrives), so it is sent only in the handshake
  era. It goes to the calling connection only; other legacy connections to the same HTTP server learn of
  the change at their next `tools/list`.

Capabilities say `tools.listChanged: true` in both eras (the lowlevel default says false for the handshake
era; `create_initialization_options` is overridden for that).

    python tests/servers/changing.py                  # stdio
    python tests/servers/changing.py --http 8765      # streamable HTTP, http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import json
import re
from typing import Any

from _serve import serve
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

TOOL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_NAME_ARG: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Tool name."}},
    "required": ["name"],
}

BASE_TOOLS: list[Tool] = [
    Tool(
        name="add_tool", description="Add a tool called `name` and announce tools/list_changed.", input_schema=_NAME_ARG
    ),
    Tool(
        name="remove_tool",
        description="Remove a tool that add_tool added and announce tools/list_changed.",
        input_schema=_NAME_ARG,
    ),
    Tool(
        name="list_names",
        description="Return the names of all current tools.",
        input_schema={"type": "object", "properties": {}},
        output_schema={
            "type": "object",
            "properties": {"names": {"type": "array", "items": {"type": "string"}}},
            "required": ["names"],
        },
    ),
]
_BASE_NAMES = {tool.name for tool in BASE_TOOLS}

added: dict[str, Tool] = {}  # in insertion order; shared by every connection of this process
bus = InMemorySubscriptionBus()


def _text(text: str) -> TextContent:
    return TextContent(type="text", text=text)


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[_text(text)], is_error=True)


def current_tools() -> list[Tool]:
    return [*BASE_TOOLS, *added.values()]


async def announce_tools_changed(ctx: ServerRequestContext) -> None:
    """Tell clients that the tool list changed, in the way the caller's protocol era understands."""
    # 2026-07-28: to subscriptions/listen streams (what MCPServer's ctx.notify_tools_changed() does).
    # Legacy streams never subscribe, so publishing is harmless for them.
    await bus.publish(ToolsListChanged())
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        # Handshake era: notifications/tools/list_changed on this connection. This is
        # ctx.session.send_tool_list_changed() sent as related to the current request: on stdio that
        # makes no difference, on streamable HTTP it rides this call's SSE response stream, which is
        # certainly open, instead of the standalone GET stream, which the client may not have opened
        # yet (a notification for a missing GET stream is dropped).
        await ctx.session.send_notification(ToolListChangedNotification(), related_request_id=ctx.request_id)


async def list_tools(ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
    return ListToolsResult(tools=current_tools())


async def call_tool(ctx: ServerRequestContext, params: CallToolRequestParams) -> CallToolResult:
    name = params.name
    args = params.arguments or {}
    if name == "list_names":
        names = [tool.name for tool in current_tools()]
        return CallToolResult(content=[_text(json.dumps(names))], structured_content={"names": names})
    if name in ("add_tool", "remove_tool"):
        target = args.get("name")
        if not isinstance(target, str):
            return _error("argument 'name' must be a string")
        if name == "add_tool":
            if not TOOL_NAME.fullmatch(target):
                return _error(f"invalid tool name {target!r}: must match {TOOL_NAME.pattern}")
            if target in _BASE_NAMES or target in added:
                return _error(f"tool {target!r} already exists")
            added[target] = Tool(
                name=target,
                description=f"Added at run time by add_tool({target!r}).",
                input_schema={"type": "object", "additionalProperties": True},
            )
            await announce_tools_changed(ctx)
            return CallToolResult(content=[_text(f"added {target}")])
        if target not in added:
            return _error(f"tool {target!r} was not added by add_tool")
        del added[target]
        await announce_tools_changed(ctx)
        return CallToolResult(content=[_text(f"removed {target}")])
    if name in added:
        return CallToolResult(content=[_text(f"{name} called with {json.dumps(args, sort_keys=True)}")])
    raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")


class ChangingServer(Server):
    """A lowlevel `Server` that advertises `tools.listChanged: true` on handshake-era connections too."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )


server = ChangingServer(
    "changing",
    version="1.0.0",
    instructions="Test server: the tool list changes at run time.",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_subscriptions_listen=ListenHandler(bus),
)

if __name__ == "__main__":
    serve(server)
