"""ledger: a destructive tool that leaves a trace on disk, to count how often it really ran.

* `record(entry)` appends `entry` and a newline to the file named by the LEDGER_PATH environment
  variable (O_APPEND: lines from several processes never interleave) and returns the entry. It is
  annotated `destructiveHint: true`, so `wasmexec serve` asks the user before each call.

Several `wasmexec serve` replicas configured with this server and one LEDGER_PATH share the ledger:
the replica-set tests read it to check that an approved call ran exactly once across all of them.

    LEDGER_PATH=/tmp/ledger python tests/servers/ledger.py     # stdio
"""

from __future__ import annotations

import os

from _serve import serve
from mcp.server import MCPServer
from mcp.types import ToolAnnotations

mcp = MCPServer("ledger", version="1.0.0", instructions="Test server: an append-only ledger.", log_level="WARNING")


@mcp.tool(annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False, idempotent_hint=False))
def record(entry: str) -> str:
    """Append `entry` to the ledger (destructive: asks the user first), and return it."""
    descriptor = os.open(os.environ["LEDGER_PATH"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, entry.encode() + b"\n")
    finally:
        os.close(descriptor)
    return entry


if __name__ == "__main__":
    serve(mcp)
