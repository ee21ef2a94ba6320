"""The `run_python` tool as models see it: its description (the runtime contract) and schemas.

The description's size is constant whatever servers are configured: tools are found
from inside the sandbox (progressive disclosure), not listed here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from wasmexec._limits import Limits
from wasmexec._profiles import DEFAULT, Profile

#: Code longer than this (in characters) is refused before it reaches a sandbox: agents send
#: scripts, not data (data comes from tools), and a bigger payload only costs the host.
MAX_CODE_CHARS = 1024 * 1024
#: A run names a handful of servers; more is a mistake, and each costs a connection.
MAX_SERVERS = 100
#: Server ids are names from the operator's config.
MAX_SERVER_ID_CHARS = 256
#: A request for less is surely a mistake: the interpreter needs about 20 MiB to start
#: (measured: `result = 1` fails at 16 MiB and runs at 24 MiB).
MIN_MEMORY_MB = 16
#: Input files of one call, decoded, in total: files are inputs to a script, and a JSON-RPC message that carries
#: them whole (as base64, a third larger) must stay reasonable. Streamable HTTP also caps a request at 4 MiB.
MAX_INPUT_BYTES = 16 * 1024 * 1024
#: Input files of one call: a handful is normal; the workspace's file limit applies as well.
MAX_INPUT_FILES = 1000
#: A session id is `secrets.token_urlsafe(32)`: 43 characters; anything much longer is not one of ours.
MAX_SESSION_ID_CHARS = 128
#: The header that carries `session_id` over 2026-era HTTP (`Mcp-Param-Session-Id`), so a proxy can route on it.
SESSION_ID_HEADER = "Session-Id"
#: Tool descriptions are read by models: sizes in the units people use.
_KIB, _MIB = 1024, 1024 * 1024


def description(ceilings: Limits, profiles: Sequence[Profile] = (DEFAULT,), no_files: Collection[str] = ()) -> str:
    """The tool description: the runtime contract, with this server's limits (also the most a call may ask for).

    `profiles` are the guest images offered, the default first; with more than one, a line per other
    profile says what it has (the `profile` argument picks one). `no_files` names those without /workspace.
    """
    first = profiles[0]
    intro = first.intro.format(python=first.python, packages=first.package_line())
    if len(profiles) > 1:
        others = " or ".join(_offered(other, other.name in no_files) for other in profiles[1:])
        intro += f'\n`profile`: "{first.name}" (above) or {others}.'
    return _DESCRIPTION.format(
        intro=intro,
        files=_NO_FILES if first.name in no_files else _FILES,
        timeout=f"{ceilings.timeout_ms / 1000:g} s",
        memory=f"{ceilings.memory_mb} MiB",
        tool_calls=ceilings.max_tool_calls,
        llm_calls=ceilings.max_llm_calls,
        llm_tokens=ceilings.max_llm_tokens,
        stdout=_size(ceilings.max_stdout_bytes),
        result=_size(ceilings.max_result_bytes),
        workspace=_size(ceilings.workspace_bytes),
        workspace_files=ceilings.workspace_files,
    )


def _offered(profile: Profile, no_files: bool) -> str:
    """Another profile a call may pick, in a few words."""
    files = "; no files or sessions" if no_files else ""
    if not profile.packages:
        return f'"{profile.name}": {profile.summary}{files}'
    return f'"{profile.name}": Python {profile.python} with {profile.package_line()} (discovery.packages()){files}'


def _size(count: int) -> str:
    for unit, size in (("MiB", _MIB), ("KiB", _KIB)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


_FILES = """\
Files: the code runs in /workspace; `files` puts inputs there; files it writes come back as artifacts \
(result.artifacts, MCP resources). `session: true` keeps /workspace for later calls that pass the \
returned session_id (files persist, variables do not); `end_session: true` ends it after the code (empty \
code: at once). /workspace/skills/*.py and /skills/*.py import as skills.<name>."""
_NO_FILES = "Files: none in this profile (no /workspace, `files` or sessions)."

_DESCRIPTION = """\
{intro}

Find tools, then call them (top-level await works; calls are async):
  from codemode import discovery
  discovery.list_servers()                       # [{{server_id, server_name, module}}]
  discovery.search_tools("create issue")         # {{query, results: [{{server_id, tool_name, export_name}}]}}
  discovery.get_tool("github", "create_issue")   # schemas, signature, return type, docstring, needs_approval
  import servers.github as gh                    # module = server id, lowercased, non-alnum -> "_"
  issue = await gh.create_issue(owner="o", repo="r", title="t")   # keyword args, or one dict
  import asyncio
  a, b = await asyncio.gather(gh.get_issue(number=1), gh.get_issue(number=2))  # concurrent
Function names: tool name split on . _ - and camelCase, joined by _, lowercased (getUser -> get_user).
help(gh.create_issue) shows parameters and the return type (output schema, or shapes seen before). \
Denied tools are not listed. Resources: await gh.resources.list(), .read(uri), .templates().
The client's model: from codemode import llm; text = await llm.ask(prompt, system=None, max_tokens=512) \
(SamplingUnavailableError if the client cannot sample).

Results are unwrapped: structuredContent if the tool returns it, else a single text block as str, else \
the whole result dict; raw=True returns the whole MCP result ({{content, structuredContent, isError}}) \
without raising on isError. Return data by assigning `result = ...` (or end with an expression); \
print() goes to logs.

{files}

Errors (codemode.errors, each with .hint and .retryable): SchemaValidationError (bad arguments; \
.errors has JSON pointers and an example), ToolNotFoundError / ServerNotFoundError (with suggestions), \
ToolCallError, ApprovalDeniedError (refused: do not retry), SandboxLimitError. A failing script still \
returns a result: read result.error and diagnostics (code, message, hint, line).

Limits (a call may lower those it can pass as arguments): {timeout} wall clock, {memory} memory, \
{tool_calls} tool calls, {llm_calls} llm.ask calls and {llm_tokens} answer tokens, {stdout} of stdout, \
{result} result, {workspace} and {workspace_files} files in /workspace. Keep results small: filter and \
aggregate inside the sandbox."""

#: The description with the default limits (what `wasmexec serve` without limit options lists).
DESCRIPTION = description(Limits())


#: One input file: its path relative to /workspace, and its content as text or as base64 (exactly one of them).
_INPUT_FILE: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "text": {"type": "string"}, "base64": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}


def input_schema(ceilings: Limits, profiles: Sequence[str] = ("default",)) -> dict[str, Any]:
    """The arguments of `run_python`, and their validator: each limit's maximum and default is the operator's.

    With more than one profile offered, `profile` picks one (the first by default); with one it is not listed.
    """
    schema = _input_schema(ceilings)
    if len(profiles) > 1:
        schema["properties"]["profile"] = {"type": "string", "enum": list(profiles), "default": profiles[0],
                                           "description": "The sandbox image (see the description)."}  # fmt: skip
    return schema


def _input_schema(ceilings: Limits) -> dict[str, Any]:
    """The arguments every server takes."""

    def limit(ceiling: int, minimum: int, what: str) -> dict[str, Any]:
        meaning = f"{what} (default and maximum {ceiling}: this server's limit; a call may only lower it)."
        return {"type": "integer", "minimum": min(minimum, ceiling), "maximum": ceiling, "default": ceiling,
                "description": meaning}  # fmt: skip

    return {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Python source to run (a module; top-level await allowed).",
                     "maxLength": MAX_CODE_CHARS},
            "timeout_ms": limit(ceilings.timeout_ms, 1, "Wall-clock limit in ms"),
            "memory_mb": limit(ceilings.memory_mb, MIN_MEMORY_MB, "Memory limit in MiB"),
            "max_tool_calls": limit(ceilings.max_tool_calls, 0, "Tool calls allowed"),
            "max_llm_calls": limit(ceilings.max_llm_calls, 0, "llm.ask calls allowed"),
            "max_llm_tokens": limit(ceilings.max_llm_tokens, 0, "Tokens of llm.ask answers allowed"),
            "servers": {"type": "array", "items": {"type": "string", "maxLength": MAX_SERVER_ID_CHARS},
                        "maxItems": MAX_SERVERS,
                        "description": "Server ids the code will use: connected before it starts."},
            "files": {"type": "array", "maxItems": MAX_INPUT_FILES, "items": _INPUT_FILE,
                      "description": f"Input files for /workspace, {{path, text}} or {{path, base64}}; "
                                     f"at most {_size(MAX_INPUT_BYTES)} in total."},
            "session": {"type": "boolean", "description": "Keep /workspace for later calls (returns session_id)."},
            # A plain string (never nullable): 2026-era clients drop a tool whose x-mcp-header property is not.
            "session_id": {"type": "string", "maxLength": MAX_SESSION_ID_CHARS, "x-mcp-header": SESSION_ID_HEADER,
                           "description": "Run in this session's /workspace."},
            "end_session": {"type": "boolean", "description": "End the session (session_id) after this call's "
                            "code; with empty code, at once. Ending an ended session is no error."},
        },
        "required": ["code"],
        "additionalProperties": False,
    }  # fmt: skip
