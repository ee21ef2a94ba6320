"""Upstream MCP resources, reached like tools: `servers.<module>.resources.list()`, `.read(uri)`, `.templates()`.

A resource request travels the tool-call path (WIT ``start-call`` with a resource
``call-kind``), so it is counted, bounded, policy-checked, approved when the policy
asks, traced and audited like a tool call. For policy, trace and audit it has a
reserved tool name with a ``/``, which MCP tool names cannot contain (SEP-986)::

    resources.list()        <server>.resources/list            (also <server>.resources.list)
    resources.templates()   <server>.resources/templates/list  (also <server>.resources.templates)
    resources.read(uri)     <server>.resources/read            (also <server>.resources.read)

so ``deny = ["github.*"]`` covers them, and ``deny = ["*.resources/*"]`` denies every resource.
Listings fetch every page (at most `pool.MAX_LIST_PAGES`); answers are bounded like tool results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from wasmexec._runctx.toolhost import HostCallError
from wasmexec._tools.catalog import ToolEntry

if TYPE_CHECKING:
    from mcp import Client

#: Longest URI accepted: real ones are paths and ids; a longer one is a mistake or an attack.
MAX_URI_CHARS: Final = 8_192

_NO_ARGUMENTS: Final = {"type": "object", "properties": {}, "additionalProperties": False}
_URI: Final = {
    "type": "object",
    "properties": {"uri": {"type": "string", "minLength": 1, "maxLength": MAX_URI_CHARS,
                           "description": "The resource's URI, from resources.list() or a template."}},
    "required": ["uri"],
    "additionalProperties": False,
}  # fmt: skip

#: WIT call-kind → (reserved tool name, Python name, input schema).
OPERATIONS: Final = {
    "list-resources": ("resources/list", "resources.list", _NO_ARGUMENTS),
    "list-resource-templates": ("resources/templates/list", "resources.templates", _NO_ARGUMENTS),
    "read-resource": ("resources/read", "resources.read", _URI),
}

#: (protocol-like name, Python name) of every operation: what policy globs may name besides tools.
NAMES: Final = [(name, export_name) for name, export_name, _ in OPERATIONS.values()]


def entry(server_id: str, kind: str) -> ToolEntry:
    """The tool-like entry of a resource operation: what policy, validation, trace and audit see."""
    name, export_name, schema = OPERATIONS[kind]
    tool = {"name": name, "description": f"MCP {name}", "inputSchema": schema, "annotations": {"readOnlyHint": True}}
    return ToolEntry(server_id, name, export_name, tool)


async def send(client: Client, kind: str, arguments: dict[str, Any], max_pages: int) -> Any:
    """Sends the request and returns its answer as JSON: the lists, or what was read (see `read_answer`)."""
    if kind == "read-resource":
        result = await client.read_resource(arguments["uri"])
        return read_answer([c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in result.contents])
    listing = client.list_resources if kind == "list-resources" else client.list_resource_templates
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(max_pages):
        page = await listing(cursor=cursor)
        found = page.resources if kind == "list-resources" else page.resource_templates  # type: ignore[union-attr]
        items += [item.model_dump(by_alias=True, exclude_none=True, mode="json") for item in found]
        cursor = page.next_cursor
        if not cursor:
            return items
    raise HostCallError("tool-error", f"the {OPERATIONS[kind][0]} listing did not end after {max_pages} pages",
                        "The server pages without end; its maintainers can fix it.")  # fmt: skip


def read_answer(contents: list[dict[str, Any]]) -> Any:
    """One text content → its text; otherwise every content (``{uri, mimeType, text}`` or ``{..., blob}``)."""
    if len(contents) == 1 and isinstance(contents[0].get("text"), str):
        return contents[0]["text"]
    return contents
