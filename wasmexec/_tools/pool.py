"""Live MCP client sessions, one per server, shared by every run of a host.

Each connection is owned by one long-lived task (an mcp `Client` must be exited by
the task that entered it); calls from other tasks share it and run concurrently.
Connections start lazily on first use, reconnect after a crash, and sit behind a
per-server circuit breaker and a concurrency cap with a bounded queue. A server
that fails never affects the others.

The breaker counts only the server's own failures: a start that fails or outlives
the connect timeout (once per attempt), a connection that breaks mid-call, a tool
listing that fails, and a call or listing that outlives the server's own timeout
(`ServerConfig.timeout`, else `DEFAULT_SERVER_TIMEOUT_S`). It never counts what a
run does to itself: its deadline passing first (`DeadlineReached`), its calls being
cancelled when it ends, a full queue (`ServerBusy`, a retryable refusal), a reply
over the size cap. Any answer from the server, an error answer included, resets it.

Clients come from a `ClientFactory`: by default the real stdio and streamable HTTP
clients with bounded replies (`wasmexec._tools.transports`); tests pass in-process
`mcp.Client(server)`s over the SDK's in-memory transport.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import anyio
from anyio.abc import TaskGroup

from wasmexec._tools.config import ServerConfig
from wasmexec._tools.mcp_errors import (
    DeadlineReached,
    ServerBusy,
    ServerUnavailable,
    is_reply_too_large,
    is_transport_failure,
)

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client.session import IncomingMessage, MessageHandlerFnT
    from mcp.types import CallToolResult

T = TypeVar("T")

__all__ = ["ClientFactory", "DeadlineReached", "Listing", "Pool", "ServerBusy", "ServerUnavailable"]

ClientFactory = Callable[[ServerConfig, "MessageHandlerFnT"], AbstractAsyncContextManager["Client"]]
"""Makes the (unentered) client of one server; it must pass `message_handler` on to the session."""

#: npx may download a package on first start; longer than that is a broken server.
DEFAULT_CONNECT_TIMEOUT_S = 60.0
#: A call or listing this long is a hung server (runs' deadlines usually come first).
DEFAULT_SERVER_TIMEOUT_S = 300.0
#: Calls in flight to one server; MCP servers are often single-threaded.
DEFAULT_MAX_CONCURRENT_CALLS = 8
#: Calls queued behind the cap before new ones are refused instead of piling up.
DEFAULT_MAX_QUEUED_CALLS = 64
#: Consecutive failures that open a server's circuit breaker.
BREAKER_THRESHOLD = 3
#: How long an open breaker refuses calls before letting one through (half-open).
BREAKER_COOLDOWN_S = 30.0
#: Pages of `tools/list` read from one server: a paginator that never ends cannot hang a listing.
MAX_LIST_PAGES = 100


@dataclass
class Breaker:
    """Opens after `threshold` consecutive failures; half-open after `cooldown_s`."""

    threshold: int = BREAKER_THRESHOLD
    cooldown_s: float = BREAKER_COOLDOWN_S
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None

    def check(self, server_id: str) -> None:
        """Raises ServerUnavailable while open; lets one trial call through once cooled down."""
        if self.opened_at is None:
            return
        waited = self.clock() - self.opened_at
        if waited < self.cooldown_s:
            raise ServerUnavailable(
                f"server {server_id!r} failed {self.failures} times in a row; calls are paused",
                f"Retry in {self.cooldown_s - waited:.0f} s.",
            )
        self.opened_at = self.clock()  # half-open: this call is the trial; others wait again

    @property
    def state(self) -> str:
        """``closed``; ``open`` (refusing calls); ``half_open`` (cooled down: the next call is a trial)."""
        if self.opened_at is None:
            return "closed"
        return "open" if self.clock() - self.opened_at < self.cooldown_s else "half_open"

    def succeeded(self) -> None:
        self.failures, self.opened_at = 0, None

    def failed(self) -> None:
        self.failures += 1
        if self.failures >= self.threshold:
            self.opened_at = self.clock()


@dataclass
class Listing:
    """What `tools/list` (all pages) and the handshake say about a server."""

    server_name: str
    server_version: str
    title: str | None
    instructions: str | None
    protocol_version: str
    tools: list[dict[str, Any]]
    """Tools in wire form (camelCase keys)."""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Listing:
        return cls(**{key: value.get(key) for key in cls.__dataclass_fields__})  # type: ignore[arg-type]


class _Attempt:
    """One connection attempt and, if it succeeds, the life of that connection."""

    def __init__(self) -> None:
        self.ready = anyio.Event()  # set once connected, or once the attempt ended
        self.stop = anyio.Event()
        self.client: Client | None = None
        self.error: BaseException | None = None
        self.scope: anyio.CancelScope | None = None
        self.finished = False
        self.closing = False


class _Connection:
    def __init__(self, config: ServerConfig, pool: Pool) -> None:
        self.config = config
        self._pool = pool
        self._attempt: _Attempt | None = None
        self.breaker = Breaker()
        self._slots = anyio.Semaphore(pool.max_concurrent_calls)
        self._queued = 0

    @property
    def server_id(self) -> str:
        return self.config.server_id

    @property
    def timeout_s(self) -> float:
        """How long the server itself may take to answer before that counts as its failure."""
        return self.config.timeout or self._pool.server_timeout_s

    async def client(self, timeout: float) -> Client:
        """The live client, connecting first if needed (concurrent callers share one attempt)."""
        attempt = self._attempt
        if attempt is None or attempt.finished:
            attempt = self._attempt = _Attempt()
            self._pool.task_group.start_soon(self._own, attempt)
        if attempt.client is not None:
            return attempt.client
        with anyio.move_on_after(timeout):
            await attempt.ready.wait()
        if attempt.client is not None:
            return attempt.client
        if not attempt.ready.is_set():  # the attempt goes on for later calls, up to the connect timeout
            raise DeadlineReached(f"server {self.server_id!r} did not finish starting before the deadline")
        missing = _missing_command(self.config, attempt.error, self._pool.errlog)
        if missing is not None:
            raise ServerUnavailable(
                f"server {self.server_id!r} failed to start: {missing}",
                "Install the server's program, or fix \"command\" in the MCP config (an absolute path does not "
                "depend on PATH).", retryable=False,
            )  # fmt: skip
        raise ServerUnavailable(
            f"server {self.server_id!r} failed to start: {_describe(attempt.error)}",
            "Check the server's command, args and env in the MCP config.",
        )

    async def _own(self, attempt: _Attempt) -> None:
        with anyio.CancelScope() as scope:
            attempt.scope = scope
            scope.deadline = anyio.current_time() + self._pool.connect_timeout_s  # until connected
            try:
                async with self._pool.open_client(self.config, self._on_message) as client:
                    scope.deadline = math.inf
                    attempt.client = client
                    attempt.ready.set()
                    async with anyio.create_task_group() as group:
                        group.start_soon(self._listen, client)
                        await attempt.stop.wait()
                        group.cancel_scope.cancel()
            except Exception as exc:
                attempt.error = exc
        connected = attempt.ready.is_set()
        if scope.cancelled_caught and attempt.error is None and not connected:
            attempt.error = TimeoutError()
        if not connected and not attempt.closing:
            self.breaker.failed()  # a failed start counts once, however many callers waited for it
        attempt.client, attempt.finished = None, True
        attempt.ready.set()
        if self._attempt is attempt:
            self._attempt = None

    async def _listen(self, client: Client) -> None:
        """2026-era servers announce tool list changes only on a listen stream."""
        from mcp.client.subscriptions import ListenNotSupportedError, ToolsListChanged

        try:
            async with client.listen(tools_list_changed=True) as events:
                async for event in events:
                    if isinstance(event, ToolsListChanged):
                        self._pool.notify_changed(self.server_id)
        except ListenNotSupportedError:
            return  # the 2025 era: notifications arrive through _on_message
        except Exception:
            return

    async def _on_message(self, message: IncomingMessage) -> None:
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._pool.notify_changed(self.server_id)

    def broken(self) -> None:
        """Drops the connection after a transport failure; the next call reconnects."""
        attempt, self._attempt = self._attempt, None
        if attempt is not None:
            attempt.client, attempt.finished = None, True
            attempt.stop.set()

    async def close(self) -> None:
        attempt = self._attempt
        if attempt is None:
            return
        attempt.closing = True
        attempt.stop.set()
        if attempt.client is None and attempt.scope is not None:
            attempt.scope.cancel()  # still starting

    async def acquire_slot(self, timeout: float) -> None:
        """Waits for a call slot: ServerBusy when the queue is full, DeadlineReached when none frees in time."""
        if self._queued >= self._pool.max_queued_calls:
            raise ServerBusy(
                f"server {self.server_id!r} has {self._queued} calls queued, the most it takes; this call was "
                "refused without being sent",
                "Retry in a moment, or make fewer calls at once (at most "
                f"{self._pool.max_concurrent_calls + self._pool.max_queued_calls} in flight per server).",
            )
        self._queued += 1
        try:
            with anyio.fail_after(timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise DeadlineReached(
                f"server {self.server_id!r} is busy; no call slot freed before the deadline"
            ) from None
        finally:
            self._queued -= 1

    def release_slot(self) -> None:
        self._slots.release()

    def transport_failed(self) -> None:
        """The connection broke under a call: reconnect next time, and count it against the server."""
        self.broken()
        self.breaker.failed()

    def timed_out(self, doing: str, server_bound: bool) -> ServerUnavailable:
        """The error of a timeout; only the server's own timeout counts against it."""
        if not server_bound:
            return DeadlineReached(f"server {self.server_id!r} did not finish {doing} before the deadline",
                                   "Ask for less, or raise the run's timeout.")  # fmt: skip
        self.breaker.failed()
        return ServerUnavailable(f"server {self.server_id!r} did not finish {doing} within its timeout of "
                                 f"{self.timeout_s:g} s")  # fmt: skip


def _missing_command(config: ServerConfig, error: BaseException | None, errlog: TextIO | None) -> str | None:
    """Why a stdio server could not start when its command does not exist; None for any other failure.

    The directories searched go to the server log (`errlog`, the operator's), never into the
    message: that one reaches the sandboxed code, which sees no host path.
    """
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if config.transport != "stdio" or not isinstance(error, FileNotFoundError) or not config.command:
        return None
    command = config.command
    if os.sep in command:
        where = f"{command} does not exist"
        found = f"its command {command!r} does not exist on the host"
    else:
        where = f"searched PATH={(config.env or {}).get('PATH') or os.environ.get('PATH', os.defpath)}"
        found = f"its command {command!r} was not found on the host's PATH"
    with contextlib.suppress(Exception):  # a closed log never hides the error itself
        print(f"wasmexec: server {config.server_id!r}: command {command!r} not found: {where}",
              file=errlog if errlog is not None else sys.stderr, flush=True)  # fmt: skip
    return found


def _describe(error: BaseException | None) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if error is None:
        return "unknown error"
    if isinstance(error, TimeoutError):
        return "timed out"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


#: What a broken connection looks like from under a call (besides MCPError CONNECTION_CLOSED).
_BROKEN_TRANSPORT = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


class Pool:
    """Connections to every configured server. Use as an async context manager."""

    def __init__(
        self,
        servers: dict[str, ServerConfig],
        *,
        on_tools_changed: Callable[[str], None] | None = None,
        errlog: TextIO | None = None,
        client_factory: ClientFactory | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        server_timeout_s: float = DEFAULT_SERVER_TIMEOUT_S,
        max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
        max_queued_calls: int = DEFAULT_MAX_QUEUED_CALLS,
        on_secret: Callable[[str], None] | None = None,
    ) -> None:
        """
        Args:
            servers: the configured servers by id.
            on_tools_changed: told the server id when a server announces a tool list change.
            errlog: where stdio servers' stderr goes (default: this process's stderr).
            client_factory: makes each server's client (default: real stdio/HTTP with bounded replies).
            connect_timeout_s: how long a server may take to start and handshake.
            server_timeout_s: how long a call or listing may take when the server sets no `timeout`.
            max_concurrent_calls: calls in flight per server.
            max_queued_calls: calls waiting for a slot per server; more are refused with `ServerBusy`.
            on_secret: gets credentials the real clients obtain (OAuth tokens), for the redactor.
        """
        self.servers = servers
        self.on_tools_changed = on_tools_changed
        self.errlog = errlog
        self.open_client: ClientFactory = client_factory or self._real_client
        self.connect_timeout_s = connect_timeout_s
        self.server_timeout_s = server_timeout_s
        self.max_concurrent_calls = max_concurrent_calls
        self.max_queued_calls = max_queued_calls
        self.on_secret = on_secret
        self._connections: dict[str, _Connection] = {}
        self._group: TaskGroup | None = None
        self._group_cm: Any = None

    @property
    def task_group(self) -> TaskGroup:
        if self._group is None:
            raise RuntimeError("the pool is not open (use `async with Pool(...)`)")
        return self._group

    async def __aenter__(self) -> Pool:
        self._group_cm = anyio.create_task_group()
        self._group = await self._group_cm.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stops every connection and its server process. Idempotent."""
        if self._group_cm is None:
            return
        for connection in self._connections.values():
            await connection.close()
        group_cm, self._group_cm = self._group_cm, None
        self._group = None
        await group_cm.__aexit__(None, None, None)  # owners close their clients (and processes) as they exit

    def notify_changed(self, server_id: str) -> None:
        if self.on_tools_changed is not None:
            self.on_tools_changed(server_id)

    def breaker_states(self) -> dict[str, str]:
        """Each configured server's breaker state (read-only; safe from any thread)."""
        connections = self._connections
        return {s: connections[s].breaker.state if s in connections else "closed" for s in self.servers}

    def _connection(self, server_id: str) -> _Connection:
        if server_id not in self._connections:
            self._connections[server_id] = _Connection(self.servers[server_id], self)
        return self._connections[server_id]

    def _real_client(self, config: ServerConfig, on_message: MessageHandlerFnT) -> Client:
        """An unentered mcp Client for one server over stdio or streamable HTTP, replies bounded."""
        from mcp import Client
        from mcp.types import Implementation

        from wasmexec._tools.transports import http_transport, sse_transport, stdio_transport
        from wasmexec._version import __version__

        if config.transport in ("http", "sse"):
            opener = http_transport if config.transport == "http" else sse_transport
            transport = opener(config, on_secret=self.on_secret, sign_in_timeout=self.connect_timeout_s)
        else:
            transport = stdio_transport(config, self.errlog)
        info = Implementation(name="wasmexec", version=__version__)
        return Client(transport, client_info=info, message_handler=on_message, cache=None)

    async def list_tools(self, server_id: str, timeout: float) -> Listing:
        """Every page of `tools/list`, plus what the handshake said, within `timeout` seconds."""
        connection = self._connection(server_id)
        connection.breaker.check(server_id)
        limit = min(timeout, connection.timeout_s)
        try:
            with anyio.fail_after(limit):
                client = await connection.client(timeout)
                tools = await _all_tools(client)
        except TimeoutError as exc:
            raise connection.timed_out("listing its tools", limit < timeout) from exc
        except ServerUnavailable:
            raise  # a failed start was counted by its attempt; a deadline is not the server's fault
        except Exception as exc:
            if is_transport_failure(exc) or isinstance(exc, _BROKEN_TRANSPORT):
                connection.broken()
            connection.breaker.failed()
            raise ServerUnavailable(f"server {server_id!r} failed while listing its tools: {_describe(exc)}") from exc
        connection.breaker.succeeded()
        info = client.server_info
        return Listing(
            server_name=getattr(info, "name", None) or server_id, server_version=getattr(info, "version", None) or "",
            title=getattr(info, "title", None), instructions=client.instructions,
            protocol_version=client.protocol_version, tools=tools,
        )  # fmt: skip

    async def call_tool(self, server_id: str, name: str, arguments: dict[str, Any], timeout: float) -> CallToolResult:
        """Calls a tool within `timeout` seconds (the caller's deadline) and the server's own timeout."""
        return await self.request(server_id, f"calling {name!r}", lambda client: client.call_tool(name, arguments),
                                  timeout)  # fmt: skip

    async def request(self, server_id: str, doing: str, send: Callable[[Client], Awaitable[T]], timeout: float) -> T:
        """Sends one request (`send(client)`) like a tool call: breaker, call slot, deadlines, failures.

        `doing` says what it is in errors ("calling 'x'", "reading a resource")."""
        from mcp import MCPError

        connection = self._connection(server_id)
        connection.breaker.check(server_id)
        limit = min(timeout, connection.timeout_s)
        deadline = anyio.current_time() + limit
        client = await connection.client(timeout)
        await connection.acquire_slot(max(0.0, deadline - anyio.current_time()))
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                result = await send(client)
        except TimeoutError as exc:
            raise connection.timed_out(doing, limit < timeout) from exc
        except MCPError as exc:
            if is_transport_failure(exc):
                connection.transport_failed()
                raise ServerUnavailable(f"server {server_id!r} failed while {doing}: {_describe(exc)}") from exc
            if not is_reply_too_large(exc):
                connection.breaker.succeeded()  # it answered, if with an error
            raise
        except _BROKEN_TRANSPORT as exc:
            connection.transport_failed()
            raise ServerUnavailable(f"server {server_id!r} failed while {doing}: {_describe(exc)}") from exc
        finally:
            connection.release_slot()
        connection.breaker.succeeded()
        return result


async def _all_tools(client: Client) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ValueError(f"tools/list did not end after {MAX_LIST_PAGES} pages")
