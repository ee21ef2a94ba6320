"""The tool-host protocol: what the sandbox asks of whatever answers its tool calls.

The sandbox (`wasmexec._sandbox`) calls a `ToolHost`; the broker (`wasmexec._tools`)
is one. Neither imports the other: both import this module. Failures cross the
boundary as `HostCallError`, whose `kind` is the WIT ``error-kind`` enum of
``wasm_assets/wit/world.wit``.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol, TypeVar

#: The largest JSON payload a single host call accepts or returns; bigger is a limit error.
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
#: Longest server id or tool name the host looks up; MCP asks for tool names of at most 128 characters.
MAX_NAME_CHARS = 256

#: The version of the discovery API the guest speaks through any tool host (`codemode.discovery.spec_version`).
SPEC_VERSION = "1.0"

#: The WIT ``call-kind`` enum, case for case: what a started call asks of a server.
CallKind = Literal["tool", "tool-raw", "list-resources", "list-resource-templates", "read-resource"]
CALL_KINDS: tuple[CallKind, ...] = ("tool", "tool-raw", "list-resources", "list-resource-templates", "read-resource")

#: The WIT ``error-kind`` enum, case for case.
ErrorKind = Literal[
    "invalid-argument", "not-found", "limit-exceeded", "denied", "authentication", "unavailable", "tool-error",
    "internal",
]  # fmt: skip


class HostCallError(Exception):
    """A host call failed; becomes a WIT ``host-error`` (kind, message, hint, detail)."""

    def __init__(self, kind: ErrorKind, message: str, hint: str = "", **detail: Any) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.hint = hint
        self.detail = detail


def internal_error(exc: BaseException) -> HostCallError:
    """The one way a bug on the host becomes a guest-visible error (never a traceback)."""
    return HostCallError("internal", f"host error: {type(exc).__name__}: {exc}"[:500])


#: The run a tool host is handed (`wasmexec._runctx.runstate.RunState`): a type parameter, so this module
#: need not import the run state that holds a `ToolHost` (the package imports one way).
RunT_contra = TypeVar("RunT_contra", contravariant=True)


class ToolHost(Protocol[RunT_contra]):
    """What answers the guest's catalog queries and tool calls (the broker): a ``ToolHost[RunState]``."""

    def catalog(self, run: RunT_contra, op: str, request: Any) -> Any:
        """Answers a discovery query; raises HostCallError."""

    def start_call(
        self, run: RunT_contra, handle: int, server_id: str, tool_name: str, arguments: Any, *, kind: CallKind = "tool"
    ) -> None:
        """Starts a call and later reports it with `run.complete(handle, ...)`; raises HostCallError.

        `kind` says what is asked (see `CallKind` and the WIT ``call-kind``): a tool's result unwrapped or
        whole, or a resource listing or read (then `tool_name` is ignored)."""

    def refused(self, run: RunT_contra, server_id: str, tool_name: str, error: HostCallError) -> None:
        """Told about a call the sandbox refused before `start_call` (a cap, a size), to audit it like any other."""


class NoTools:
    """The tool host of a sandbox with no MCP servers configured: a ``ToolHost`` of any run (it reads none)."""

    def catalog(self, run: object, op: str, request: Any) -> Any:
        if op == "list_servers":
            return []
        if op == "spec_version":
            return SPEC_VERSION
        raise HostCallError(
            "not-found", "no MCP servers are configured", "Configure servers on the host (--config).", what="server"
        )

    def start_call(
        self, run: object, handle: int, server_id: str, tool_name: str, arguments: Any, *, kind: CallKind = "tool"
    ) -> None:
        self.catalog(run, "get_server", {"server_id": server_id})

    def refused(self, run: object, server_id: str, tool_name: str, error: HostCallError) -> None:
        """Nothing to audit: there is no broker."""


def encode_payload(value: Any, what: str) -> str:
    """Compact JSON of a host call's answer; a `payload_bytes` limit error when too large.

    The text is always valid UTF-8: a lone surrogate (a JSON ``\\ud800`` escape from a server)
    stays escaped, since a WIT string cannot carry it.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(value, separators=(",", ":"))
    if len(text) > MAX_PAYLOAD_BYTES:
        raise HostCallError(
            "limit-exceeded",
            f"{what} is {len(text)} bytes; the limit is {MAX_PAYLOAD_BYTES}",
            "Ask for less (filter, paginate, lower detail).",
            limit="payload_bytes",
        )
    return text
