"""Live MCP client sessions, one per server, shared by every run of a host.

Each connection is owned by one long-lived task (an mcp `Client` must be exited by
the task that entered it); calls from other tasks share it and run concurrently.
Connections start lazily on first use, reconnect after a crash, and sit behind a
per-server circuit breaker and a concurrency cap with a bounded queue. A server
that fails never affects the others.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
from anyio.abc import TaskGroup

from wasmexec._tools.config import ServerConfig

#: npx may download a package on first start; longer than that is a broken server.
DEFAULT_CONNECT_TIMEOUT_S = 60.0
#: Calls in flight to one server; MCP servers are often single-threaded.
DEFAULT_MAX_CONCURRENT_CALLS = 8
#: Calls queued behind the cap before new ones are refused instead of piling up.
DEFAULT_MAX_QUEUED_CALLS = 64
#: Consecutive failures that open a server's circuit breaker.
BREAKER_THRESHOLD = 3
#: How long an open breaker refuses calls before letting one through (half-open).
BREAKER_COOLDOWN_S = 30.0


class ServerUnavailable(Exception):
    """The server could not be reached, crashed, timed out or is switched off by its breaker."""

    def __init__(self, message: str, hint: str = "", *, retryable: bool = True) -> None:
        super().__init__(message)
        self.hint = hint or "Try again later; the server may be starting or overloaded."
        self.retryable = retryable


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
        self.client: Any = None
        self.error: BaseException | None = None
        self.scope: anyio.CancelScope | None = None
        self.finished = False


class _Connection:
    def __init__(self, config: ServerConfig, pool: Pool) -> None:
        self.config = config
        self._pool = pool
        self._attempt: _Attempt | None = None
        self.breaker = Breaker()
        self._slots = anyio.Semaphore(pool.max_concurrent_calls)
        self._queued = 0

    async def client(self, timeout: float) -> Any:
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
            raise ServerUnavailable(f"server {self.config.server_id!r} did not finish starting in time")
        raise ServerUnavailable(
            f"server {self.config.server_id!r} failed to start: {_describe(attempt.error)}",
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
        if scope.cancelled_caught and attempt.error is None and attempt.client is None:
            attempt.error = TimeoutError()
        attempt.client, attempt.finished = None, True
        attempt.ready.set()
        if self._attempt is attempt:
            self._attempt = None

    async def _listen(self, client: Any) -> None:
        """2026-era servers announce tool list changes only on a listen stream."""
        from mcp.client.subscriptions import ListenNotSupportedError, ToolsListChanged

        try:
            async with client.listen(tools_list_changed=True) as events:
                async for event in events:
                    if isinstance(event, ToolsListChanged):
                        self._pool.notify_changed(self.config.server_id)
        except ListenNotSupportedError:
            return  # the 2025 era: notifications arrive through _on_message
        except Exception:
            return

    async def _on_message(self, message: Any) -> None:
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._pool.notify_changed(self.config.server_id)

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
        attempt.stop.set()
        if attempt.client is None and attempt.scope is not None:
            attempt.scope.cancel()  # still starting

    async def acquire_slot(self, timeout: float) -> None:
        if self._queued >= self._pool.max_queued_calls:
            raise ServerUnavailable(f"server {self.config.server_id!r} has too many calls queued")
        self._queued += 1
        try:
            with anyio.fail_after(timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise ServerUnavailable(f"server {self.config.server_id!r} is busy; no call slot freed in time") from None
        finally:
            self._queued -= 1

    def release_slot(self) -> None:
        self._slots.release()


def _describe(error: BaseException | None) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if error is None:
        return "unknown error"
    if isinstance(error, TimeoutError):
        return "timed out"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class Pool:
    """Connections to every configured server. Use as an async context manager."""

    def __init__(
        self,
        servers: dict[str, ServerConfig],
        *,
        on_tools_changed: Callable[[str], None] | None = None,
        errlog: TextIO | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
        max_queued_calls: int = DEFAULT_MAX_QUEUED_CALLS,
    ) -> None:
        self.servers = servers
        self.on_tools_changed = on_tools_changed
        self.errlog = errlog
        self.connect_timeout_s = connect_timeout_s
        self.max_concurrent_calls = max_concurrent_calls
        self.max_queued_calls = max_queued_calls
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

    def _connection(self, server_id: str) -> _Connection:
        if server_id not in self._connections:
            self._connections[server_id] = _Connection(self.servers[server_id], self)
        return self._connections[server_id]

    def open_client(self, config: ServerConfig, on_message: Any) -> AbstractAsyncContextManager[Any]:
        """An unentered mcp Client for one server (stdio or streamable HTTP)."""
        from mcp import Client
        from mcp.types import Implementation

        from wasmexec._version import __version__

        info = Implementation(name="wasmexec", version=__version__)
        client: AbstractAsyncContextManager[Any] = Client(
            self._transport(config), client_info=info, message_handler=on_message, cache=None
        )
        return client

    def _transport(self, config: ServerConfig) -> Any:
        if config.transport == "http":
            return _http_transport(config)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert config.command is not None
        # "replace": one undecodable byte from a server would otherwise kill the reader and hang every call.
        params = StdioServerParameters(
            command=config.command, args=list(config.args), env=config.env or None, cwd=config.cwd,
            encoding_error_handler="replace",
        )  # fmt: skip
        return stdio_client(params, errlog=self.errlog or sys.stderr)

    async def list_tools(self, server_id: str, timeout: float) -> Listing:
        """Every page of `tools/list`, plus what the handshake said."""
        connection = self._connection(server_id)
        connection.breaker.check(server_id)
        try:
            with anyio.fail_after(timeout):
                client = await connection.client(timeout)
                tools: list[dict[str, Any]] = []
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in page.tools]
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except (ServerUnavailable, TimeoutError, Exception) as exc:
            connection.breaker.failed()
            raise _unavailable(server_id, "listing its tools", exc) from exc
        connection.breaker.succeeded()
        info = client.server_info
        return Listing(
            server_name=getattr(info, "name", None) or server_id, server_version=getattr(info, "version", None) or "",
            title=getattr(info, "title", None), instructions=client.instructions,
            protocol_version=client.protocol_version, tools=tools,
        )  # fmt: skip

    async def call_tool(self, server_id: str, name: str, arguments: dict[str, Any], timeout: float) -> Any:
        """Calls a tool within `timeout` seconds; returns the mcp CallToolResult."""
        from mcp import MCPError

        connection = self._connection(server_id)
        connection.breaker.check(server_id)
        deadline = anyio.current_time() + timeout
        try:
            client = await connection.client(timeout)
            await connection.acquire_slot(max(0.0, deadline - anyio.current_time()))
        except ServerUnavailable:
            connection.breaker.failed()
            raise
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                result = await client.call_tool(name, arguments)
        except MCPError as exc:
            if _is_transport_failure(exc):
                connection.broken()
                connection.breaker.failed()
                raise _unavailable(server_id, f"calling {name!r}", exc) from exc
            raise
        except TimeoutError as exc:
            connection.breaker.failed()
            raise ServerUnavailable(
                f"server {server_id!r} did not answer {name!r} before the run's deadline",
                "Ask for less, or raise the run's timeout.",
            ) from exc
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError) as exc:
            connection.broken()
            connection.breaker.failed()
            raise _unavailable(server_id, f"calling {name!r}", exc) from exc
        finally:
            connection.release_slot()
        connection.breaker.succeeded()
        return result


@asynccontextmanager
async def _http_transport(config: ServerConfig) -> AsyncIterator[Any]:
    """Streamable HTTP with the configured headers; the HTTP client closes with the connection."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    assert config.url is not None
    async with (
        httpx2.AsyncClient(headers=config.headers, timeout=httpx2.Timeout(30.0, read=None)) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


def _is_transport_failure(error: Any) -> bool:
    from mcp_types import CONNECTION_CLOSED

    return bool(getattr(error, "code", None) == CONNECTION_CLOSED)


def _unavailable(server_id: str, doing: str, error: BaseException) -> ServerUnavailable:
    if isinstance(error, ServerUnavailable):
        return error
    return ServerUnavailable(f"server {server_id!r} failed while {doing}: {_describe(error)}")
