"""The run result: one JSON object per run (CLI stdout line, MCP structuredContent).

The shapes are TypedDicts so that building a result costs no more than building a
dict (a plain ``wasmexec run`` never imports pydantic); pydantic validates them and
exports their JSON Schema (`run_result_json_schema`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Literal, NotRequired

if sys.version_info >= (3, 12):
    from typing import TypedDict
else:  # pydantic reads only typing_extensions' TypedDict before 3.12 (importing it costs every start 3 ms)
    from typing_extensions import TypedDict

#: The one name of the tool whose runs this describes (the MCP tool and every result's `tool_name`).
TOOL_NAME = "run_python"


def new_id() -> str:
    """A fresh random run or trace id: 32 hex digits, the form of ``uuid.uuid4().hex``.

    Made here because importing `uuid` (with `platform`) cost every `wasmexec run` 2 ms.
    """
    data = bytearray(os.urandom(16))
    data[6] = (data[6] & 0x0F) | 0x40  # version 4 (random), as RFC 4122 says
    data[8] = (data[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return data.hex()


LogLevel = Literal["debug", "log", "warn", "error"]
Severity = Literal["error", "warning", "info"]
ApprovalState = Literal["NOT_REQUIRED", "APPROVED", "DENIED"]
LimitName = Literal[
    "timeout", "memory", "fuel", "stack", "result_bytes", "result_depth", "tool_calls", "payload_bytes", "cancelled",
    "workspace_bytes", "workspace_files",
    "llm_calls", "llm_tokens",
]  # fmt: skip
#: Why the host stopped a run: a limit, a refused blocking wait (a BLOCKING_WAIT error, not a limit), or no
#: free slot in the pooling allocator (a SANDBOX_BUSY error).
StopReason = LimitName | Literal["blocking_wait", "busy"]

#: The deepest nesting of lists and objects a result's data may have. The data sits 4 levels
#: deep in an MCP ``tools/call`` answer; the `mcp` Python client (pydantic-core) refuses a
#: message nested deeper than 200 levels and Rust's serde_json deeper than 128, so 100 leaves
#: a margin for clients that wrap the result again.
MAX_RESULT_DEPTH = 100


class LogEntry(TypedDict):
    """One line the code wrote: stdout is ``log``, stderr is ``error``."""

    level: LogLevel
    message: str
    time_ms: float
    """Milliseconds since the run started."""


class Frame(TypedDict):
    """One traceback frame inside the sandboxed code."""

    line: int
    function: str
    text: str


class Diagnostic(TypedDict):
    """Something worth knowing about the run, with a one-line hint."""

    severity: Severity
    code: str
    """SYNTAX_ERROR, UNCAUGHT_EXCEPTION, IMPORT_FAILURE, SANDBOX_LIMIT, RESULT_NOT_JSON, LOGS_TRUNCATED, ..."""
    message: str
    hint: NotRequired[str]
    path: NotRequired[str]
    error_class: NotRequired[str]
    line: NotRequired[int]
    column: NotRequired[int]
    frames: NotRequired[list[Frame]]
    limit: NotRequired[LimitName]
    """For SANDBOX_LIMIT: which limit fired."""


class Metrics(TypedDict):
    duration_ms: float
    fuel_used: int | None
    """Instructions metered by wasmtime fuel; None when fuel metering is off."""
    memory_peak_bytes: int | None
    """Peak linear memory of the sandbox; None where the runtime cannot report it."""
    tool_calls: int


class ErrorInfo(TypedDict):
    type: str
    """The exception class, e.g. ZeroDivisionError or SandboxLimitError."""
    message: str
    retryable: bool


class Success(TypedDict):
    ok: Literal[True]
    data: Any
    metrics: Metrics


class Failure(TypedDict):
    ok: Literal[False]
    error: ErrorInfo
    metrics: Metrics


class ToolTraceEntry(TypedDict):
    """One tool call; never its arguments or result."""

    server_id: str
    tool_name: str
    duration_ms: float
    ok: bool
    error: NotRequired[str]


class Artifact(TypedDict):
    """A file the run created or changed in /workspace."""

    path: str
    """Relative to /workspace, ``/``-separated."""
    size: int
    sha256: str
    """Hex digest of the content."""
    mime_type: str
    """From the file name (images only when their first bytes agree); ``application/octet-stream`` if unknown."""


class RunResult(TypedDict):
    """Everything one run returns."""

    run_id: str
    trace_id: str
    tool_name: str
    tool_version: str
    input_digest: str
    """sha256 of the code, as ``sha256:<hex>``."""
    output_digest: str
    """sha256 of the JSON of ``result``."""
    sandbox_image: str
    """sha256 of the guest component the code ran in."""
    duration_ms: float
    approval_state: ApprovalState
    result: Success | Failure
    logs: list[LogEntry]
    diagnostics: list[Diagnostic]
    tool_trace: list[ToolTraceEntry]
    artifacts: list[Artifact]
    """Files the run created or changed in /workspace, sorted by path (empty without a workspace)."""
    session_id: NotRequired[str]
    """The session the run worked in (`wasmexec serve` with ``session: true`` or a ``session_id``)."""


#: Characters that JSON allows raw in strings but line-based readers split on (Python's
#: ``str.splitlines``, JavaScript source): escaped on the output line.
_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with every lone surrogate (not encodable as UTF-8) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


def valid_strings(value: Any) -> Any:
    """A copy of a JSON value with `valid_text` applied to every string and key."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, list):
        return [valid_strings(item) for item in value]
    if isinstance(value, dict):
        return {valid_text(key): valid_strings(item) for key, item in value.items()}
    return value


def result_json(value: Any) -> str:
    """The one strict encoding of a run result: the line `wasmexec run` prints.

    Compact UTF-8 JSON on one line: NaN and infinities raise ValueError (a run result
    never holds them), a lone surrogate becomes U+FFFD, and U+0085, U+2028 and U+2029
    are escaped so that no line-based reader splits the line.
    """
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if text.isascii():
        return text
    for raw, escaped in _LINE_BREAKS.items():
        if raw in text:  # only ever inside strings: JSON's structure is ASCII
            text = text.replace(raw, escaped)
    return valid_text(text)


def encoded_size(value: Any) -> int:
    """Bytes of `value` on the output line (a str counts its quotes)."""
    return len(result_json(value).encode("utf-8"))


def run_result_json_schema() -> dict[str, Any]:
    """The JSON Schema of `RunResult` (the MCP tool's outputSchema)."""
    schema: dict[str, Any] = _adapter().json_schema()
    return schema


def inlined_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every plain ``{"$ref": "#/$defs/X"}`` replaced by X itself and ``$defs`` gone: the same
    constraints, cheaper to check. An MCP client validates every result against the tool's outputSchema,
    and jsonschema resolves each ``$ref`` at every use (a quarter of checking a trivial run's result).
    The RunResult schema is not recursive; a recursive one would not end, so the depth is bounded."""
    definitions = schema.get("$defs", {})

    def inline(node: Any, depth: int) -> Any:
        if depth > _MAX_INLINE_DEPTH:
            raise ValueError("a recursive schema cannot be inlined")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if len(node) == 1 and isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(definitions[ref.removeprefix("#/$defs/")], depth + 1)
            return {key: inline(value, depth + 1) for key, value in node.items() if key != "$defs"}
        if isinstance(node, list):
            return [inline(value, depth + 1) for value in node]
        return node

    inlined: dict[str, Any] = inline(schema, 0)
    return inlined


#: Nesting an inlined schema may reach (RunResult's is about 12 deep).
_MAX_INLINE_DEPTH = 64


def validate_run_result(value: Any) -> RunResult:
    """Checks a value against `RunResult`; raises pydantic.ValidationError when it does not fit."""
    result: RunResult = _adapter().validate_python(value, strict=True)
    return result


def _adapter() -> Any:
    from pydantic import TypeAdapter

    global _ADAPTER
    if _ADAPTER is None:
        _ADAPTER = TypeAdapter(RunResult)
    return _ADAPTER


_ADAPTER: Any = None
