"""How many `run_python` runs a server takes at once, and how many it lets wait.

A call is admitted when fewer than ``max_concurrent_runs + max_queued_runs`` runs are
in flight or queued; otherwise it is refused at once (HTTP: 503 with ``Retry-After``
before the JSON-RPC dispatch, see `wasmexec._server.http_app`; stdio: a retryable
error result, `busy_result`), so a burst of calls cannot pile up threads and memory.
An admitted run waits on its own thread for one of ``max_concurrent_runs`` slots.

A draining server (`Admission.drain`, on SIGTERM: `wasmexec._server.shutdown`) admits no
new run at all and refuses each the same retryable way, so a proxy sends it elsewhere;
runs admitted before go on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from mcp.types import CallToolResult, TextContent

from wasmexec._envelope import Diagnostic, ErrorInfo, RunResult, new_id
from wasmexec._sandbox.result import failure_result
from wasmexec._sandbox.sandbox import DEFAULT_MAX_CONCURRENT_RUNS

#: Runs waiting for a slot beyond those running: a short burst waits, a flood is refused.
DEFAULT_MAX_QUEUED_RUNS = 16
#: What a refused client is told to wait (seconds): about one short run.
RETRY_AFTER_S = 2

Observer = Callable[[RunResult | BaseException], None]


class Admission:
    """Counts runs in flight and queued; thread-safe."""

    def __init__(
        self,
        max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS,
        max_queued_runs: int = DEFAULT_MAX_QUEUED_RUNS,
        observer: Observer | None = None,
    ) -> None:
        """
        Args:
            max_concurrent_runs: runs executing at once.
            max_queued_runs: admitted runs waiting for a slot; more calls are refused.
            observer: told each admitted run's result (or the exception that kept it from running).
        """
        self.max_concurrent_runs = max_concurrent_runs
        self.max_queued_runs = max_queued_runs
        self.observer = observer
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_concurrent_runs)
        self.running = 0
        self.queued = 0
        self.draining = False
        """No new run is admitted (the server is stopping); set once, never cleared."""

    def full(self) -> bool:
        """Whether the next call would be refused: no room, or draining."""
        return self.draining or self._no_room()

    def _no_room(self) -> bool:
        return self.running + self.queued >= self.max_concurrent_runs + self.max_queued_runs

    def drain(self) -> None:
        """Admits no new run from now on; runs admitted before go on."""
        with self._lock:
            self.draining = True

    def admit(self, continuing: bool = False) -> Ticket | None:
        """A place for one run (queued until it enters its ticket), or None when full or draining.

        `continuing`: the run finishes one a client already started (the replay of a paused approval):
        a draining server still takes it, as it lets the runs in flight finish; only room counts.
        """
        with self._lock:
            if self.full() and not (continuing and self.draining and not self._no_room()):
                return None
            self.queued += 1
        return Ticket(self)


def own_slot() -> Ticket:
    """A ticket of a private, empty admission: for a run that no server admitted (never waits)."""
    ticket = Admission(1, 0).admit()
    assert ticket is not None  # an empty admission always has room
    return ticket


class Ticket:
    """One admitted run. ``with ticket:`` waits for a slot and holds it; `record` reports the result."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._settled = False

    def cancel(self) -> None:
        """Gives the place back: the run will never start (its request failed or was cancelled first)."""
        with self._admission._lock:
            if not self._settled:
                self._settled = True
                self._admission.queued -= 1

    def __enter__(self) -> Ticket:
        admission = self._admission
        with admission._lock:
            if self._settled:
                raise RuntimeError("a cancelled ticket cannot run")
            self._settled = True
        admission._slots.acquire()
        with admission._lock:
            admission.queued -= 1
            admission.running += 1
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        admission = self._admission
        with admission._lock:
            admission.running -= 1
        admission._slots.release()

    def record(self, result: RunResult | BaseException) -> None:
        """Tells the observer (metrics) how the run ended; never raises."""
        observer = self._admission.observer
        if observer is not None:
            try:
                observer(result)
            except Exception:  # metrics must never cost a run its result
                pass


def refusal(admission: Admission) -> str:
    """Why a new run is refused now (`Admission.full`)."""
    if admission.draining:
        return "the server is draining (shutting down) and takes no new runs; another replica will"
    return "the server is busy: too many runs in flight and queued"


def busy_result(admission: Admission) -> CallToolResult:
    """The answer to a call that found the server full or draining: a retryable failure in the run result's shape."""
    message = (
        refusal(admission)
        if admission.draining
        else (
            f"the server is busy: {admission.running} runs in flight and {admission.queued} queued "
            f"(at most {admission.max_concurrent_runs} and {admission.max_queued_runs})"
        )
    )
    hint = f"Retry in {RETRY_AFTER_S} s; nothing ran."
    error: ErrorInfo = {"type": "ServerBusy", "message": message, "retryable": True}
    diagnostic: Diagnostic = {"severity": "error", "code": "SERVER_BUSY", "message": message, "hint": hint}
    structured = failure_result(error, diagnostic, run_id=new_id(), trace_id=new_id())
    text = f"Error: ServerBusy: {message}. Hint: {hint}"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(structured),
                          is_error=True)  # fmt: skip
