"""The one place where what goes wrong with an MCP server becomes an error the guest sees.

The pool raises the errors defined here (and lets the SDK's through); the broker hands
every failure of a call to `to_host_error`, which picks the `HostCallError` kind::

    ServerBusy          its queue is full, or no call slot freed in time   unavailable (retryable)
    DeadlineReached     the caller's deadline came first                   limit-exceeded (timeout, retryable)
    ServerUnavailable   failed to start, crashed, broke the transport,     unavailable (retryable),
                        timed out on its own timeout, breaker open         or authentication
    a reply over the size cap (`REPLY_TOO_LARGE`, or the SDK's SSE cap)    limit-exceeded (payload_bytes)
    MCPError -32602 invalid params                                         invalid-argument
    MCPError -32601 method not found                                       not-found
    MCPError -32000 connection closed, -32001 request timeout              unavailable (retryable)
    MCPError or HTTP 401/403 ("Unauthorized", "Forbidden")                 authentication
    any other MCPError (the server answered with an error)                 tool-error
    a result with isError (`tool_error`)                                   tool-error
    pydantic ValidationError (a reply that breaks the protocol)            tool-error
    anything else (a bug on the host)                                      internal

Retryable errors say so in their hint and carry ``retryable: true`` in their detail
(the WIT ``host-error`` has no field for it). Texts from the server are cut to a size with
a `Show` function, which the broker passes so that a PII value the call was given is hidden
before the cut, not left half visible at it (`wasmexec._tools.pii.Given.shown`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from wasmexec._runctx.toolhost import HostCallError, internal_error

if TYPE_CHECKING:
    from mcp.types import CallToolResult

#: How a transport of ours says it dropped a reply over the size cap (see `transports`).
REPLY_TOO_LARGE = "reply too large"
#: The SDK's own words when a server-sent event is over `max_sse_event_size`.
_SSE_TOO_LARGE = re.compile(r"Server-sent event exceeded the \d+ byte limit")
_AUTH = re.compile(r"\b401\b|Unauthorized|HTTP 403\b")
#: An error text is read by a model: enough for any real message, never megabytes.
MAX_ERROR_TEXT = 8_000
#: Cuts a server's text to at most the given number of characters (hiding what must not be left at the cut).
Show = Callable[[str, int], str]
_RETRY_HINT = "Retry in a moment; the server may be starting, busy or restarting."
_LESS_HINT = "Ask for less (filter, paginate, lower detail)."


class ServerUnavailable(Exception):
    """The server could not be reached, crashed, timed out on its own timeout or is paused by its breaker."""

    server_fault = True
    """Whether this counts towards the server's circuit breaker."""

    def __init__(self, message: str, hint: str = "", *, retryable: bool = True) -> None:
        super().__init__(message)
        self.hint = hint or _RETRY_HINT
        self.retryable = retryable


class ServerBusy(ServerUnavailable):
    """The server's call queue is full, or no call slot freed before the caller's deadline."""

    server_fault = False


class DeadlineReached(ServerUnavailable):
    """The caller's deadline (the run's) passed before the server answered: not the server's fault."""

    server_fault = False


def is_reply_too_large(error: BaseException) -> bool:
    message = str(getattr(error, "message", None) or error)
    return REPLY_TOO_LARGE in message or _SSE_TOO_LARGE.search(message) is not None


def is_transport_failure(error: BaseException) -> bool:
    """Whether an MCPError means the connection is gone (not an answer from the server)."""
    from mcp_types import CONNECTION_CLOSED

    return getattr(error, "code", None) == CONNECTION_CLOSED and not is_reply_too_large(error)


def _is_auth(error: BaseException | None) -> bool:
    while error is not None:
        if getattr(error, "code", None) in (401, 403) or _AUTH.search(str(getattr(error, "message", "") or error)):
            return True
        error = error.__cause__
    return False


def cut(text: str, limit: int) -> str:
    """The plain `Show`: `text` cut to `limit` characters."""
    return text[:limit]


def _retryable(message: str, hint: str = _RETRY_HINT) -> HostCallError:
    return HostCallError("unavailable", message, hint, retryable=True)


def to_host_error(error: BaseException, server_id: str, tool_name: str, show: Show = cut) -> HostCallError:
    """The guest-visible error for a failed call of `tool_name` on `server_id` (see the table above)."""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, METHOD_NOT_FOUND, REQUEST_TIMEOUT
    from pydantic import ValidationError

    if isinstance(error, HostCallError):
        return error
    if isinstance(error, DeadlineReached):
        return HostCallError("limit-exceeded", str(error), "Ask for less, or raise the run's timeout.",
                             limit="timeout", retryable=True)  # fmt: skip
    if is_reply_too_large(error):
        return HostCallError("limit-exceeded", f"the reply of {server_id}.{tool_name} was dropped unread: {error}",
                             _LESS_HINT, limit="payload_bytes")  # fmt: skip
    if _is_auth(error):
        return HostCallError(
            "authentication",
            show(f"{server_id}: {error}", 500),
            "The server rejected the credentials configured on the host (its env or headers).",
        )
    if isinstance(error, ServerUnavailable):
        return HostCallError(
            "unavailable",
            show(str(error), MAX_ERROR_TEXT),
            error.hint,
            **({"retryable": True} if error.retryable else {}),
        )
    if isinstance(error, MCPError):
        return _from_mcp_error(error, server_id, tool_name, show, CONNECTION_CLOSED, REQUEST_TIMEOUT, INVALID_PARAMS,
                               METHOD_NOT_FOUND)  # fmt: skip
    if isinstance(error, ValidationError):
        return HostCallError("tool-error", f"{server_id} sent a reply that breaks the MCP protocol: "
                             f"{error.error_count()} problems, first: {error.errors()[0]['msg']}"[:500],
                             "The server is broken; its maintainers can fix it.")  # fmt: skip
    return internal_error(error)


def _from_mcp_error(error: BaseException, server_id: str, tool_name: str, show: Show, *codes: int) -> HostCallError:
    closed, timeout, invalid, missing = codes
    code = getattr(error, "code", None)
    message = show(str(getattr(error, "message", "") or error), 500)
    if code in (closed, timeout):
        return _retryable(f"server {server_id!r} failed while calling {tool_name!r}: {message}")
    if code == invalid:  # the arguments passed our check of its schema: the schema we have may be stale
        return HostCallError("invalid-argument", f"{tool_name}: {message}",
                             "The server rejected the arguments; its schema may have changed. Check get_tool().",
                             code=code)  # fmt: skip
    if code == missing:
        return HostCallError(
            "not-found", f"{server_id}: {message}", "The server does not offer this; check list_tools()."
        )
    return HostCallError(
        "tool-error", f"{tool_name} failed: {message}", "The server reported an error; read the message."
    )


def schema_disagreement(error: HostCallError) -> bool:
    """Whether the server rejected arguments that passed our check of its schema (ours may be stale)."""
    from mcp_types import INVALID_PARAMS

    return error.kind == "invalid-argument" and error.detail.get("code") == INVALID_PARAMS


def tool_error(result: CallToolResult, show: Show = cut) -> HostCallError:
    """The error of a result with ``isError``: the server's own text."""
    from mcp.types import TextContent

    text = "\n".join(block.text for block in result.content if isinstance(block, TextContent))
    if len(text) > MAX_ERROR_TEXT:
        text = show(text, MAX_ERROR_TEXT) + f"… [{len(text)} characters]"
    return HostCallError("tool-error", text or "the tool reported an error",
                         "The server reported an error; read the message.")  # fmt: skip
