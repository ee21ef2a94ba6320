"""The record of one run's tool calls: the `tool_trace` and its single, locked writer.

Every call attempt gets exactly one entry, in the order the guest made them (by
handle): refused ones (a cap, a size, policy, schema, an unknown tool) as soon as
they are refused, started ones when they end. When the run ends first, `close`
records every call still open as cancelled and ignores whatever its task reports
later, so the trace the result is built from is final and truthful.

Ownership: the run's worker thread (the guest's host calls) calls `open` and
`refused`; the broker's event loop thread calls `record` when a call ends; the
worker thread calls `close` (from `RunState.finish`, before cancelling the calls
still in flight) and then `trace`. Every method takes the one lock, so any thread
may call any of them; the first end of a call wins and later ones are ignored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from wasmexec._envelope import ToolTraceEntry

#: What a call still open when the run ended is recorded as.
CANCELLED = "cancelled: the run ended before the call finished"
#: Names are the guest's (or a server's) strings: kept short in the trace.
MAX_NAME_CHARS = 200
#: Enough for any error message; a longer one is cut.
MAX_ERROR_CHARS = 500


@dataclass
class _TracedCall:
    server_id: str
    tool_name: str
    started: float
    entry: ToolTraceEntry | None = None


@dataclass
class CallLog:
    """Thread-safe: the guest's thread opens calls, the broker's loop records their ends."""

    _calls: dict[int, _TracedCall] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def open(self, handle: int, server_id: str, tool_name: str) -> None:
        """A call was accepted and started (once per handle; a handle already known is left alone)."""
        with self._lock:
            self._calls.setdefault(handle, _TracedCall(server_id[:MAX_NAME_CHARS], tool_name[:MAX_NAME_CHARS],
                                                 time.monotonic()))  # fmt: skip

    def record(self, handle: int, *, ok: bool, error: str | None = None) -> bool:
        """Ends a call; False when it was already ended (the run closed it as cancelled first).

        A call cancelled by its task is recorded with ``error=CANCELLED``, never as ``ok``."""
        with self._lock:
            call = self._calls.get(handle)
            if call is None or call.entry is not None:
                return False
            call.entry = _entry(call, ok, error)
            return True

    def refused(self, handle: int, server_id: str, tool_name: str, error: str) -> None:
        """A call refused before it started (policy, schema, a cap): recorded at once.

        The sandbox and the tool host may both refuse one attempt: the first reason is kept."""
        with self._lock:
            if handle in self._calls:
                return
            call = _TracedCall(server_id[:MAX_NAME_CHARS], tool_name[:MAX_NAME_CHARS], time.monotonic())
            call.entry = _entry(call, False, error)
            self._calls[handle] = call

    def close(self) -> None:
        """The run is over: every call still open is recorded as cancelled."""
        with self._lock:
            self._closed = True
            for call in self._calls.values():
                if call.entry is None:
                    call.entry = _entry(call, False, CANCELLED)

    def is_open(self, handle: int) -> bool:
        with self._lock:
            call = self._calls.get(handle)
            return call is not None and call.entry is None

    def trace(self) -> list[ToolTraceEntry]:
        """The entries of ended calls, in the order the calls were made."""
        with self._lock:
            return [call.entry for _, call in sorted(self._calls.items()) if call.entry is not None]


def _entry(call: _TracedCall, ok: bool, error: str | None) -> ToolTraceEntry:
    entry: ToolTraceEntry = {"server_id": call.server_id, "tool_name": call.tool_name,
                             "duration_ms": round((time.monotonic() - call.started) * 1000, 3), "ok": ok}  # fmt: skip
    if error is not None:
        entry["error"] = error[:MAX_ERROR_CHARS]
    return entry
