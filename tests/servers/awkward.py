"""awkward: tools whose names, schemas and results are hard to map onto Python.

Exercises, for whatever turns MCP tools into Python callables:

* names: `get.user` and `get-user` (both become `get_user` after mapping, so they collide), `getUser`
  and `GetUser` (camel/Pascal case, and the same snake_case again), `list` (a builtin), `class` (a
  keyword, with argument names `class` and `from` that are keywords too), `2fa_check` (starts with a
  digit), `fetch_HTTPResponse` (mixed case); `delete_item` is annotated `destructiveHint: true`.
  Each name tool answers `<tool name> <arguments as JSON>`, so a caller can tell which one ran.
* `complex_input`: an exact inputSchema with `$defs`/`$ref`, `enum`, `default`, a nested object, arrays
  (of strings and of objects), nullable fields in both spellings (`anyOf` with null, and `type: [.., "null"]`),
  bounds and `additionalProperties: false`. It answers with the arguments it received, as JSON.
* `structured_output`: an outputSchema, answered with `structuredContent` (and the same JSON as text).
* `error_result`: a result with `isError: true` and a text block (not a JSON-RPC error).
* `image_result`: one image block, a small PNG in base64 (`image/png`).
* `two_texts`: two text blocks in one result.
* `echo_args`: the arguments back as JSON text (`sort_keys`), accepting any object.
* `reformat`: its `text` back in the forms a tool may give an input back in: upper and lower case,
  URL-encoded, JSON with every character escaped, and cut into 5-character pieces.

Built on the lowlevel `Server`, so every schema goes on the wire exactly as written here. Like every
lowlevel server it does NOT validate arguments against the inputSchema: checking them is the caller's
job, and the echo shows what arrived. An unknown tool name is a JSON-RPC error -32602.

    python tests/servers/awkward.py                  # stdio
    python tests/servers/awkward.py --http 8765      # streamable HTTP, http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import base64
import json
import struct
import urllib.parse
import zlib
from typing import Any

from _serve import serve
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ImageContent,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid single-colour 8-bit RGB PNG, built by hand (no imaging library needed)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))  # filter byte 0 per row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit, colour type 2 (RGB)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG_BYTES = _png(4, 4, (220, 40, 40))
PNG_BASE64 = base64.b64encode(PNG_BYTES).decode("ascii")

_ID_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "string", "description": "User id."}},
    "required": ["id"],
}
_READ_ONLY = ToolAnnotations(read_only_hint=True)

COMPLEX_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "Priority": {"type": "string", "enum": ["low", "normal", "high"], "description": "How urgent."},
        "Address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string", "minLength": 1},
                "zip": {"type": ["string", "null"], "pattern": "^[0-9]{5}$"},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
        "Point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            "required": ["x", "y"],
        },
    },
    "properties": {
        "mode": {"type": "string", "enum": ["fast", "safe", "thorough"], "default": "safe"},
        "priority": {"$ref": "#/$defs/Priority", "default": "normal"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
        "address": {"$ref": "#/$defs/Address"},
        "options": {
            "type": "object",
            "description": "Nested object with its own defaults.",
            "properties": {
                "verbose": {"type": "boolean", "default": False},
                "retries": {"type": "integer", "minimum": 0, "default": 3},
                "filter": {
                    "type": "object",
                    "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
                },
            },
        },
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 5},
        "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "nickname": {"type": ["string", "null"]},
    },
    "required": ["address"],
    "additionalProperties": False,
}

STRUCTURED_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sum": {"type": "number"},
        "product": {"type": "number"},
        "operands": {"type": "array", "items": {"type": "number"}},
    },
    "required": ["sum", "product", "operands"],
    "additionalProperties": False,
}

NAME_TOOLS: list[Tool] = [
    Tool(name="get.user", description="Get a user (dotted name).", input_schema=_ID_SCHEMA, annotations=_READ_ONLY),
    Tool(
        name="get-user",
        description="Get a user (dashed name; collides with get.user as get_user).",
        input_schema=_ID_SCHEMA,
        annotations=_READ_ONLY,
    ),
    Tool(name="getUser", description="Get a user (camelCase name).", input_schema=_ID_SCHEMA, annotations=_READ_ONLY),
    Tool(name="GetUser", description="Get a user (PascalCase name).", input_schema=_ID_SCHEMA, annotations=_READ_ONLY),
    Tool(
        name="list",
        description="List things (name shadows a Python builtin).",
        input_schema={"type": "object", "properties": {}},
        annotations=_READ_ONLY,
    ),
    Tool(
        name="class",
        description="Classify (name and argument names are Python keywords).",
        input_schema={
            "type": "object",
            "properties": {"class": {"type": "string"}, "from": {"type": "integer"}},
            "required": ["class"],
        },
    ),
    Tool(
        name="2fa_check",
        description="Check a two-factor code (name starts with a digit).",
        input_schema={
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^[0-9]{6}$"}},
            "required": ["code"],
        },
    ),
    Tool(
        name="fetch_HTTPResponse",
        description="Fetch an HTTP response (mixed-case name).",
        input_schema={
            "type": "object",
            "properties": {"url": {"type": "string", "format": "uri"}},
            "required": ["url"],
        },
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
    ),
    Tool(
        name="delete_item",
        description="Delete an item (destructive).",
        input_schema={"type": "object", "properties": {"item_id": {"type": "string"}}, "required": ["item_id"]},
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True, read_only_hint=False),
    ),
]

FEATURE_TOOLS: list[Tool] = [
    Tool(
        name="complex_input",
        description="Takes a schema with $defs/$ref, enum, defaults, nested objects, arrays and nullables.",
        input_schema=COMPLEX_INPUT_SCHEMA,
    ),
    Tool(
        name="structured_output",
        description="Adds and multiplies two numbers; returns structuredContent matching its outputSchema.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        output_schema=STRUCTURED_OUTPUT_SCHEMA,
        annotations=_READ_ONLY,
    ),
    Tool(
        name="error_result",
        description="Always fails: returns isError with a text message.",
        input_schema={"type": "object", "properties": {"message": {"type": "string", "default": "it broke"}}},
    ),
    Tool(
        name="image_result",
        description="Returns one image block: a 4x4 red PNG.",
        input_schema={"type": "object", "properties": {}},
    ),
    Tool(
        name="two_texts",
        description="Returns two text blocks.",
        input_schema={"type": "object", "properties": {}},
    ),
    Tool(
        name="echo_args",
        description="Returns its arguments as JSON text.",
        input_schema={"type": "object", "additionalProperties": True},
    ),
    Tool(
        name="reformat",
        description="Returns `text` in upper and lower case, URL-encoded, JSON-escaped, and in 5-character pieces.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
]

TOOLS: list[Tool] = NAME_TOOLS + FEATURE_TOOLS
_NAME_TOOL_NAMES = {tool.name for tool in NAME_TOOLS}


def _text(text: str) -> TextContent:
    return TextContent(type="text", text=text)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


async def list_tools(ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
    return ListToolsResult(tools=TOOLS)


async def call_tool(ctx: ServerRequestContext, params: CallToolRequestParams) -> CallToolResult:
    name = params.name
    args = params.arguments or {}  # may be None; never validated by the lowlevel Server
    if name in _NAME_TOOL_NAMES:
        return CallToolResult(content=[_text(f"{name} {_json(args)}")])
    if name in ("complex_input", "echo_args"):
        return CallToolResult(content=[_text(_json(args))])
    if name == "structured_output":
        try:
            a, b = float(args["a"]), float(args["b"])
        except (KeyError, TypeError, ValueError) as exc:
            return CallToolResult(content=[_text(f"bad arguments: {exc!r}")], is_error=True)
        out = {"sum": a + b, "product": a * b, "operands": [a, b]}
        return CallToolResult(content=[_text(_json(out))], structured_content=out)
    if name == "error_result":
        return CallToolResult(content=[_text(str(args.get("message", "it broke")))], is_error=True)
    if name == "image_result":
        return CallToolResult(content=[ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")])
    if name == "reformat":
        text = str(args.get("text", ""))
        out = {"upper": text.upper(), "lower": text.lower(), "url": urllib.parse.quote(text, safe=""),
               "escaped": "".join(f"\\u{ord(char):04x}" for char in text),
               "pieces": [text[start:start + 5] for start in range(0, len(text), 5)]}  # fmt: skip
        return CallToolResult(content=[_text(_json(out))], structured_content=out)
    if name == "two_texts":
        return CallToolResult(content=[_text("first block"), _text("second block")])
    raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")


server = Server(
    "awkward",
    version="1.0.0",
    instructions="Test server: awkward tool names and schemas.",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
)

if __name__ == "__main__":
    serve(server)
