"""Printed output that reaches the client while the run goes.

The output capture (`wasmexec._sandbox.output`) hands every accepted piece of output to
`OutputStream.feed` on the run thread, already cut to the run's output caps, so a
stream never carries more than the result's logs. `feed` only appends under a lock;
the pieces leave from elsewhere (the server's event loop, or a printer thread for
`wasmexec run --stream`), at most every `STREAM_INTERVAL_S`, as at most one message
per stream: never more than `MAX_MESSAGES_PER_SECOND`. Each message is redacted like
the result before it leaves (streamed text goes to the model too).

Over MCP the messages are log notifications (``notifications/message``, stdout at
``info``, stderr at ``error``) when the client asked for a log level: by
``logging/setLevel`` on its session in the 2025 protocol era, by the
``io.modelcontextprotocol/logLevel`` key in the call's ``_meta`` in the 2026 era.
Otherwise they are progress messages, when the call carries a progress token.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TextIO, get_args

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.types import (
    LOG_LEVEL_META_KEY,
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    SetLevelRequestParams,
)

from wasmexec._redact import Redactor

#: How often waiting output is sent: often enough to watch a run, rarely enough not to flood a client.
STREAM_INTERVAL_S = 0.2
#: Each interval sends at most one message per stream (stdout, stderr).
MAX_MESSAGES_PER_SECOND = round(2 / STREAM_INTERVAL_S)
#: Sessions whose `logging/setLevel` is remembered; the oldest is forgotten first.
MAX_REMEMBERED_SESSIONS = 4096
#: The MCP log level of each capture level (stdout is ``log``, stderr ``error``).
MCP_LEVELS: dict[str, LoggingLevel] = {"log": "info", "error": "error", "warn": "warning", "debug": "debug"}

_SEVERITY: tuple[LoggingLevel, ...] = get_args(LoggingLevel)  # ascending, as the spec lists them

Send = Callable[[str, str], Awaitable[None]]
Context = ServerRequestContext[Any, Any]


class OutputStream:
    """The printed output of one run that has not been sent yet."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._lock = threading.Lock()
        self._pending: list[tuple[str, str]] = []

    def feed(self, level: str, text: str) -> None:
        """The capture's callback (run thread): keeps the piece for the next message; never blocks for long."""
        with self._lock:
            self._pending.append((level, text))

    def take(self) -> list[tuple[str, str]]:
        """What waits, as one redacted message per level, in the order the levels first printed."""
        with self._lock:
            pending, self._pending = self._pending, []
        joined: dict[str, list[str]] = {}
        for level, text in pending:
            joined.setdefault(level, []).append(text)
        return [(level, self._redactor.redact_text("\n".join(texts))[0]) for level, texts in joined.items()]


class LogLevels:
    """The log level each client asked for with ``logging/setLevel`` (2025 era), by session."""

    def __init__(self) -> None:
        self._levels: dict[str, LoggingLevel] = {}

    def install(self, server: Server[Any]) -> None:
        """Answers ``logging/setLevel`` on `server` (which then advertises the logging capability)."""
        server.add_request_handler("logging/setLevel", SetLevelRequestParams, self._set_level)

    async def _set_level(self, ctx: Context, params: SetLevelRequestParams) -> EmptyResult:
        key = session_of(ctx)
        self._levels.pop(key, None)
        self._levels[key] = params.level
        while len(self._levels) > MAX_REMEMBERED_SESSIONS:
            del self._levels[next(iter(self._levels))]
        return EmptyResult()

    def wanted(self, ctx: Context) -> LoggingLevel | None:
        """The least severe level this call's client wants log notifications for, or None."""
        if ctx.protocol_version.startswith("2026"):
            requested = (ctx.meta or {}).get(LOG_LEVEL_META_KEY)
            return requested if requested in _SEVERITY else None
        return self._levels.get(session_of(ctx))


def session_of(ctx: Context) -> str:
    """The client's session: its ``Mcp-Session-Id`` over 2025-era HTTP; stdio has one client."""
    headers = getattr(ctx.request, "headers", None)
    return str(headers.get("mcp-session-id") or "") if headers is not None else ""


def sender(ctx: Context, levels: LogLevels) -> Send | None:
    """How this call's output reaches its client: log notifications, progress messages, or not at all."""
    wanted = levels.wanted(ctx)
    if wanted is not None:
        least = _SEVERITY.index(wanted)

        async def log(level: str, text: str) -> None:
            mcp_level = MCP_LEVELS.get(level, "info")
            if _SEVERITY.index(mcp_level) >= least:
                notification = LoggingMessageNotification(
                    params=LoggingMessageNotificationParams(level=mcp_level, logger=_stream_name(level), data=text)
                )
                await ctx.session.send_notification(notification, related_request_id=ctx.request_id)

        return log
    if not wants_progress(ctx):
        return None

    async def progress(level: str, text: str) -> None:
        message = text if level == "log" else f"[{_stream_name(level)}] {text}"
        await ctx.session.report_progress(0.5, None, message)

    return progress


def wants_progress(ctx: Context) -> bool:
    """Whether the call carries a progress token (without one, reporting progress is a no-op)."""
    meta = ctx.meta or {}
    return bool(meta.get("progress_token", meta.get("progressToken")))


def _stream_name(level: str) -> str:
    return "stdout" if level == "log" else "stderr" if level == "error" else level


@asynccontextmanager
async def streamed(stream: OutputStream, send: Send | None) -> AsyncIterator[None]:
    """While inside, sends the stream's output every `STREAM_INTERVAL_S`; the rest when leaving."""
    if send is None:
        yield
        return
    async with anyio.create_task_group() as group:
        group.start_soon(_pump, stream, send)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
    with anyio.CancelScope(shield=True), anyio.move_on_after(STREAM_INTERVAL_S * 5):
        await _send_all(stream, send)  # the last lines arrive before the result


async def _pump(stream: OutputStream, send: Send) -> None:
    while True:
        await anyio.sleep(STREAM_INTERVAL_S)
        # Shielded: cancelled between `take` and its send (the run just ended), the text taken would be lost.
        with anyio.CancelScope(shield=True), anyio.move_on_after(STREAM_INTERVAL_S * 5):
            if not await _send_all(stream, send):
                return


async def _send_all(stream: OutputStream, send: Send) -> bool:
    """Sends what waits; False once the client cannot be reached (the run goes on regardless)."""
    try:
        for level, text in stream.take():
            await send(level, text)
    except Exception:
        return False
    return True


@contextmanager
def printed(stream: OutputStream, to: TextIO | None = None) -> Iterator[None]:
    """While inside, a thread prints the stream's output to `to` (stderr) as it comes (`wasmexec run --stream`)."""
    out = to if to is not None else sys.stderr
    done = threading.Event()

    def flush() -> None:
        for _, text in stream.take():
            out.write(text + "\n")
        out.flush()

    def work() -> None:
        while not done.wait(STREAM_INTERVAL_S):
            flush()

    printer = threading.Thread(target=work, name="wasmexec-stream", daemon=True)
    printer.start()
    try:
        yield
    finally:
        done.set()
        printer.join()
        flush()
