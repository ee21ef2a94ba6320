"""garbage: a stdio server that puts non-protocol bytes on its stdout, to test a client's wire parser.

The mcp 2.x `stdio_server()` protects the wire: while it serves, the protocol runs on a private
duplicate of fd 1 and fd 1 itself points at stderr, so `print()` or `os.write(1, ...)` in a tool (or in
a child process) no longer reaches the client. A real 1.x or non-Python server has no such guard, so
this server gets garbage onto the real wire in the two ways that remain:

* Before serving: at start-up it writes three garbage lines to fd 1, which is still the pipe to the
  client: a plain text line, a JSON value that is not JSON-RPC, and an empty line. The client reads
  them first, before (or while) it handshakes.
* During a call: `wire_garbage(kind, lines)` writes to `WIRE_FD`, a duplicate of the original fd 1
  taken at import, i.e. straight onto the wire, then answers normally. `kind` is one of
      text          a plain text line                   `garbage: not json`
      json          valid JSON that is not JSON-RPC      `{"garbage": true, "n": 0}`
      partial       a truncated JSON-RPC message         `{"jsonrpc": "2.0", "id": 0, "res`
      response      a JSON-RPC response to an id the client never used (`"garbage-0"`)
      notification  a well-formed notification with an unknown method (`notifications/garbage`)
      binary        bytes that are not UTF-8 (`\\xff\\xfe garbage \\xc3\\x28`)
  What the mcp 2.3 Python client does (checked in both eras): `text`, `json` and `partial` are logged
  ("Failed to parse JSONRPC message from server") and handed to `message_handler` as an exception,
  then skipped; the stray `response` is dropped and the unknown `notification` ignored, neither
  reaching `message_handler`; the call itself answers normally. `binary` is different: the stdio
  reader decodes strictly by default, so the bytes raise `UnicodeDecodeError` and kill the reader; the
  pending call then gets no answer until its own timeout, and leaving the `Client` raises an
  `ExceptionGroup` holding the `UnicodeDecodeError`. With
  `StdioServerParameters(encoding_error_handler="replace")` it is one more skipped parse error.
* `noisy_print()` does what a careless tool does, `print()` and `os.write(1, ...)`: with the 2.x
  guard both land on stderr, and the wire stays clean. It returns "ok".
* `ok()` returns "ok", to show the connection still works after the garbage.

The writes to `WIRE_FD` are single `os.write` calls of under 512 bytes made while no other message is
being written for a client that waits for each result, so they never split a real message. Stdio only:
there is no `--http` mode, since garbage on an HTTP body is a different test.

    python tests/servers/garbage.py
"""

from __future__ import annotations

import json
import os
import sys
from typing import Literal

from _serve import serve
from mcp.server import MCPServer

WIRE_FD = os.dup(1)  # taken before stdio_server() diverts fd 1, so this stays the real stdout pipe

GarbageKind = Literal["text", "json", "partial", "response", "notification", "binary"]


def garbage_line(kind: GarbageKind, n: int) -> bytes:
    """One line (newline included) of the given kind of garbage."""
    if kind == "text":
        return b"garbage: not json\n"
    if kind == "json":
        return json.dumps({"garbage": True, "n": n}).encode() + b"\n"
    if kind == "partial":
        return b'{"jsonrpc": "2.0", "id": %d, "res\n' % n
    if kind == "response":
        return json.dumps({"jsonrpc": "2.0", "id": f"garbage-{n}", "result": {}}).encode() + b"\n"
    if kind == "notification":
        return json.dumps({"jsonrpc": "2.0", "method": "notifications/garbage", "params": {"n": n}}).encode() + b"\n"
    if kind == "binary":
        return b"\xff\xfe garbage \xc3\x28\n"
    raise ValueError(f"unknown garbage kind {kind!r}")


mcp = MCPServer("garbage", version="1.0.0", instructions="Test server: garbage on stdout.", log_level="WARNING")


@mcp.tool()
def wire_garbage(kind: GarbageKind = "text", lines: int = 1) -> str:
    """Write `lines` garbage lines of `kind` onto the real stdout wire, then return "ok"."""
    for n in range(max(0, min(lines, 100))):
        os.write(WIRE_FD, garbage_line(kind, n))
    return "ok"


@mcp.tool()
def noisy_print() -> str:
    """print() and os.write(1) like a careless tool; the SDK sends both to stderr. Returns "ok"."""
    print("garbage from print() inside a tool", flush=True)
    os.write(1, b"garbage from os.write(1) inside a tool\n")
    sys.stdout.flush()
    return "ok"


@mcp.tool()
def ok() -> str:
    """Return "ok"."""
    return "ok"


def startup_garbage() -> None:
    """Garbage on the real stdout before the protocol starts (fd 1 is still the pipe here)."""
    for line in (b"garbage before the server starts\n", b'{"garbage": "startup"}\n', b"\n"):
        os.write(1, line)


if __name__ == "__main__":
    startup_garbage()
    serve(mcp, http=False)
