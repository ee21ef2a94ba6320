"""counter: tools that write down every call they get, so "ran exactly once" is observable across processes.

Each call appends one line ``<tool> <arguments as JSON>`` to the file named by the environment
variable ``COUNTER_FILE`` (opened in append mode per call, so several server processes may share
it), then answers:

* `launch(name)`: destructive (``destructiveHint``): answers ``{"launched": name, "calls": n}``,
  n being how many lines the file holds after this one.
* `read_value(key)`: read-only: answers ``{"key": key, "value": n}`` the same way (a value that
  changes from call to call, so a replay that calls it again would see another value).

    COUNTER_FILE=/tmp/calls python tests/servers/counter.py                 # stdio
    COUNTER_FILE=/tmp/calls python tests/servers/counter.py --http 8765     # streamable HTTP
"""

from __future__ import annotations

import json
import os
from typing import Any

from _serve import serve
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("counter", version="1.0.0", instructions="Test server: counts its calls.", log_level="WARNING")


def _count(tool: str, arguments: dict[str, Any]) -> int:
    path = os.environ["COUNTER_FILE"]
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f"{tool} {json.dumps(arguments, sort_keys=True)}\n")
    with open(path, encoding="utf-8") as handle:
        return sum(1 for _ in handle)


@mcp.tool(annotations=ToolAnnotations(destructive_hint=True))
def launch(name: str) -> dict[str, Any]:
    """Launch `name` (destructive: asks for approval); every call is written down."""
    return {"launched": name, "calls": _count("launch", {"name": name})}


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_value(key: str) -> dict[str, Any]:
    """A value that changes with every call (how many calls the file holds)."""
    return {"key": key, "value": _count("read_value", {"key": key})}


if __name__ == "__main__":
    serve(mcp)
