"""What the host knows about one running guest, shared by the sandbox and the tool host.

Owners: the run's worker thread creates it and reads it to build the result; the
guest's host calls (same thread) count calls and wait on handles; the broker's event
loop thread completes handles and records calls through `calls` (locked); the epoch
callback asks `should_stop`; `stop` may come from any thread (cancellation).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from wasmexec._calllog import CallLog
from wasmexec._envelope import LimitName, ToolTraceEntry
from wasmexec._limits import Limits
from wasmexec._toolhost import HostCallError, ToolHost


@dataclass
class RunState:
    """What the host knows about one running guest; shared with the broker's threads."""

    limits: Limits
    tools: ToolHost
    run_id: str
    started: float = field(default_factory=time.monotonic)
    stop_reason: LimitName | None = None
    tool_calls: int = 0
    """Call attempts the guest made (the `tool_calls` metric and cap)."""
    calls: CallLog = field(default_factory=CallLog)
    """The record of every call attempt (the `tool_trace`); its own lock."""
    warnings: list[str] = field(default_factory=list)
    """Host-side problems worth telling the agent (a server down, a stale tool list)."""
    catalog: Any = None
    """The tool host's frozen view of the servers for this run."""
    trace_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    code_digest: str = ""
    approver: Callable[[dict[str, Any]], bool] | None = None
    """Asks the user to approve a call (blocking; returns True to allow); None: nobody to ask."""
    progress: Callable[[str], Any] | None = None
    """Told about each tool call as it starts (the MCP server turns it into progress notifications)."""
    approvals: list[str] = field(default_factory=list)
    """"APPROVED" or "DENIED", one per call that needed approval."""
    _in_flight: list[Any] = field(default_factory=list)
    _outcomes: dict[int, Any] = field(default_factory=dict)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _handles: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def deadline(self) -> float:
        return self.started + self.limits.timeout_ms / 1000

    def remaining(self) -> float:
        """Seconds left until the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def should_stop(self) -> str | None:
        """The epoch callback's question: a reason to stop now, or None."""
        if self.stop_reason is None and time.monotonic() >= self.deadline:
            self.stop_reason = "timeout"
        return self.stop_reason

    def stop(self, reason: LimitName) -> None:
        """Asks the run to stop (cancellation); wakes a guest blocked in `wait`."""
        with self._changed:
            if self.stop_reason is None:
                self.stop_reason = reason
            self._changed.notify_all()

    def track(self, future: Any) -> None:
        """Remembers a call in flight, to cancel it if the run ends first."""
        self._in_flight.append(future)

    def finish(self) -> None:
        """Cancels every call still in flight and closes the call log (the run is over)."""
        self.calls.close()
        for future in self._in_flight:
            future.cancel()
        self._in_flight.clear()

    @property
    def tool_trace(self) -> list[ToolTraceEntry]:
        return self.calls.trace()

    def new_handle(self) -> int:
        with self._changed:
            handle = next(self._handles)
            self._outcomes[handle] = None
            return handle

    def complete(self, handle: int, outcome: str | HostCallError) -> None:
        """Records a call's outcome (JSON text or an error), from any thread."""
        with self._changed:
            if handle in self._outcomes and self._outcomes[handle] is None:
                self._outcomes[handle] = outcome
                self._changed.notify_all()

    def wait(self, handles: list[int], timeout_s: float) -> list[tuple[int, str | HostCallError]]:
        """Blocks until one of `handles` completes, the timeout, the deadline or a stop."""
        until = time.monotonic() + min(timeout_s, self.remaining())
        with self._changed:
            while True:
                ready = [(h, self._take(h)) for h in handles if self._outcomes.get(h, "") is not None]
                if ready or self.should_stop():
                    return ready
                left = until - time.monotonic()
                if left <= 0:
                    return []
                self._changed.wait(left)

    def _take(self, handle: int) -> str | HostCallError:
        if handle not in self._outcomes:
            return HostCallError("not-found", f"no pending call with handle {handle}")
        return self._outcomes.pop(handle)  # type: ignore[no-any-return]
