"""The `run_python` tool as models see it: its description (the runtime contract) and schemas.

The description's size is constant whatever servers are configured: tools are found
from inside the sandbox (progressive disclosure), not listed here.
"""

from __future__ import annotations

from typing import Any

from wasmexec._limits import DEFAULT_MAX_TOOL_CALLS, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_MS

#: Code larger than this is refused before it reaches a sandbox.
MAX_CODE_BYTES = 1024 * 1024

DESCRIPTION = f"""\
Run Python 3.14 in a fresh WebAssembly sandbox and call MCP tools from it. No network, files or \
processes; only the standard library (json, re, datetime, zoneinfo, collections, itertools, math, \
statistics, decimal, csv, textwrap, difflib, hashlib, base64, gzip, asyncio, …). socket, \
subprocess, threading, ctypes, sqlite3, bz2, lzma and third-party packages do not exist.

Find tools, then call them (top-level await works; calls are async):
  from codemode import discovery
  discovery.list_servers()                       # [{{server_id, server_name, module}}]
  discovery.search_tools("create issue")         # {{query, results: [{{server_id, tool_name, export_name}}]}}
  discovery.get_tool("github", "create_issue")   # schemas + Python signature + docstring
  import servers.github as gh                    # module = server id, lowercased, non-alnum -> "_"
  issue = await gh.create_issue(owner="o", repo="r", title="t")   # keyword args, or one dict
  a, b = await asyncio.gather(gh.get_issue(number=1), gh.get_issue(number=2))  # concurrent
Function names: tool name split on . _ - and camelCase, joined by _, lowercased (getUser -> get_user).
help(gh.create_issue) shows parameters.

Results: structuredContent if the tool returns it, else a single text block as str, else the whole \
result dict. Return data by assigning `result = ...` (or end with an expression); print() goes to logs.

Errors (from codemode.errors, each with .hint): SchemaValidationError (bad arguments; .errors has \
JSON pointers and an example), ToolNotFoundError / ServerNotFoundError (with suggestions), \
ToolCallError (the tool failed), ApprovalDeniedError (the user or policy refused: do not retry), \
SandboxLimitError. A failing script still returns a result: read result.error and diagnostics \
(code, message, hint, line).

Limits (defaults): {DEFAULT_TIMEOUT_MS // 1000} s wall clock, {DEFAULT_MEMORY_MB} MiB memory, \
{DEFAULT_MAX_TOOL_CALLS} tool calls, 64 KiB of stdout, 4 MiB result. Keep results small: filter and \
aggregate inside the sandbox instead of returning raw data."""


def input_schema(max_timeout_ms: int) -> dict[str, Any]:
    """The arguments of `run_python`."""
    return {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python source to run (a module; top-level await allowed).",
                     "maxLength": MAX_CODE_BYTES},
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": max_timeout_ms,
                           "description": f"Wall-clock limit (default {DEFAULT_TIMEOUT_MS})."},
            "memory_mb": {"type": "integer", "minimum": 16, "maximum": 4095,
                          "description": f"Memory limit in MiB (default {DEFAULT_MEMORY_MB})."},
            "max_tool_calls": {"type": "integer", "minimum": 0, "maximum": 10_000,
                               "description": f"Tool calls allowed (default {DEFAULT_MAX_TOOL_CALLS})."},
            "servers": {"type": "array", "items": {"type": "string"}, "maxItems": 100,
                        "description": "Server ids the code will use: connected before it starts."},
        },
        "required": ["code"],
        "additionalProperties": False,
    }  # fmt: skip
