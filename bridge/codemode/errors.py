"""Errors raised inside the sandbox by `codemode` and the `servers.*` modules.

Every error has a one-line ``hint`` telling you what to do next, and ``retryable``:
True when the same call may succeed later (a timeout, a server that is starting,
crashed, busy or paused by its breaker), False when it cannot as it is (bad
arguments, a denial, the tool's own error)::

    from codemode.errors import CodemodeError
    try:
        await gh.create_issue(owner="o")
    except CodemodeError as exc:
        print(type(exc).__name__, exc, exc.hint, exc.retryable)

Tree::

    CodemodeError
    ├── SchemaValidationError   arguments do not match the tool's inputSchema
    ├── ToolNotFoundError       no tool of that name on the server
    ├── ServerNotFoundError     no configured server of that id (also ModuleNotFoundError)
    ├── ToolCallError           the tool ran and reported an error (isError)
    ├── AuthenticationError     the server rejected or lacks credentials
    ├── ApprovalDeniedError     policy or the user refused the call
    ├── SandboxLimitError       a run limit fired (time, tool calls, llm calls or tokens, payload size)
    └── SamplingUnavailableError  llm.ask has no model to ask (the client or the CLI cannot sample)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

__all__ = [
    "ApprovalDeniedError",
    "AuthenticationError",
    "CodemodeError",
    "SamplingUnavailableError",
    "SandboxLimitError",
    "SchemaValidationError",
    "ServerNotFoundError",
    "ToolCallError",
    "ToolNotFoundError",
]


class CodemodeError(Exception):
    """Base class of every error raised by codemode; ``hint`` says what to do next."""

    default_hint = "See the message for details."

    def __init__(self, message: str, hint: str = "", **detail: object) -> None:
        super().__init__(message)
        self.hint = hint or self.default_hint
        self.detail = detail
        self.retryable = detail.get("retryable") is True
        """Whether the same call may succeed if tried again later (the host says so)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SchemaValidationError(CodemodeError):
    """The arguments do not match the tool's input schema; nothing was sent."""

    default_hint = "Fix the fields listed in .errors; discovery.get_tool(...) shows the schema."

    @property
    def errors(self) -> list[dict[str, object]]:
        """One entry per failing field: pointer, expected, received, message."""
        return list(cast("Iterable[dict[str, object]]", self.detail.get("errors", [])))


class ToolNotFoundError(CodemodeError, AttributeError):
    """No tool of that name exists on the server."""

    default_hint = "Use discovery.list_tools(server_id) or discovery.search_tools(query)."


class ServerNotFoundError(CodemodeError, ModuleNotFoundError):
    """No configured MCP server has that id."""

    default_hint = "Use discovery.list_servers() to see the configured servers."


class ToolCallError(CodemodeError):
    """The tool ran and reported an error (its result had isError set)."""

    default_hint = "Read the message: it is the server's own error text."


class AuthenticationError(CodemodeError):
    """The server needs credentials that are missing or were rejected."""

    default_hint = "Credentials are configured on the host, in the server's env or headers."


class ApprovalDeniedError(CodemodeError):
    """Policy or the user refused the call; the server was not called."""

    default_hint = "Ask the user to approve this tool, or change the policy on the host."


class SandboxLimitError(CodemodeError):
    """A run limit fired: time, memory, tool calls or payload size."""

    default_hint = "Do less work per run, or ask for a higher limit."


class SamplingUnavailableError(CodemodeError):
    """`llm.ask` has no model to ask: the client does not support sampling, or the run has no client."""

    default_hint = "Run through `wasmexec serve` with an MCP client that supports sampling."
