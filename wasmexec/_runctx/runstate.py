"""What the host knows about one running guest, shared by the sandbox and the tool host.

Who writes what while a run executes (the thread map of a run):

============================  =====================================================  ===========
field                         written by                                             lock
============================  =====================================================  ===========
limits, tools, run_id,        whoever creates the state, before the run; read-only   none
trace_id, approver, progress  after
on_output, sampling.sampler
started, code_digest          the run's worker thread, before the guest starts       none
tool_calls, calls_over_cap,   the run's worker thread (host functions)               none
catalog
calls                         worker thread (open, refuse), the broker's event loop  its own
                              thread (record), the worker thread at the end (close)
warnings, approvals           worker thread and broker loop thread; append-only,     GIL
                              read once the run is over
stop_reason, interruption     `stop` / `interrupted` from any thread; `should_stop`  `_changed`
                              from the epoch callback (worker thread)
outcomes, charges, held       worker thread (`reserve`, `release`, `wait`); broker   `_changed`
bytes, in-flight futures      loop thread (`complete`, a future's done callback)
============================  =====================================================  ===========

The run's worker thread reads everything to build the result after the guest has
stopped and `finish` has closed the call log.

Per-run caps on what the guest can make the host hold: at most
`MAX_OUTSTANDING_CALLS` calls started and not yet collected, and at most the run's
memory limit in bytes for their arguments (charged `DECODED_JSON_FACTOR` times their
JSON size while in flight) and their uncollected results.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wasmexec._audit import PRINCIPAL
from wasmexec._envelope import StopReason, ToolTraceEntry, new_id
from wasmexec._limits import Limits
from wasmexec._runctx.calllog import CallLog
from wasmexec._runctx.llm_ask import Sampling
from wasmexec._runctx.toolhost import HostCallError, ToolHost

if TYPE_CHECKING:
    from concurrent.futures import Future

    from wasmexec._runctx.journal import Journal  # only a type here: importing it costs every start 8 ms

#: Why a run stopped early: a limit, or a blocking WASI wait the host refused.

#: Calls started and not yet collected: far more than a sensible `gather`, and each one holds a
#: task, its arguments and a queue slot on the host.
MAX_OUTSTANDING_CALLS = 128
#: Handles `wait` accepts beyond the calls outstanding: room for stale ones (the bridge sends none).
WAIT_HANDLE_MARGIN = 64
#: Decoded JSON takes up to about 24 times its text in host memory (measured: a list of empty
#: objects), so a call's arguments are charged that much while the call is in flight.
DECODED_JSON_FACTOR = 24

_local = threading.local()


@contextmanager
def bound(run: RunState) -> Iterator[None]:
    """Makes `run` the current run of this thread (the one whose guest this thread executes)."""
    previous = getattr(_local, "run", None)
    _local.run = run
    try:
        yield
    finally:
        _local.run = previous


def current() -> RunState | None:
    """The run this thread executes, if any: host functions and the epoch callback find it here."""
    run: RunState | None = getattr(_local, "run", None)
    return run


def check_deadline(what: str) -> None:
    """Stops host work at the current run's deadline: epochs only interrupt wasm, not the host.

    Raises:
        HostCallError: ``limit-exceeded`` (limit ``timeout``) when the deadline has passed.
    """
    run = current()
    if run is not None and time.monotonic() >= run.deadline:
        raise HostCallError(
            "limit-exceeded", f"{what} was stopped at the run's deadline ({run.limits.timeout_ms} ms)",
            "Do less per run: narrower queries, smaller arguments.", limit="timeout",
        )  # fmt: skip


@dataclass
class RunState:
    """What the host knows about one running guest; shared with the broker's threads (see the module)."""

    limits: Limits
    tools: ToolHost[RunState]
    run_id: str
    started: float = field(default_factory=time.monotonic)
    stop_reason: StopReason | None = None
    interruption: BaseException | None = None
    """A KeyboardInterrupt (or other BaseException) caught in a wasmtime callback, for the run's
    owner to re-raise once the store is gone: it must never cross into wasmtime."""
    tool_calls: int = 0
    """Call attempts the guest made within the cap (the `tool_calls` metric)."""
    calls_over_cap: int = 0
    """Call attempts refused because the cap was reached (only the first is traced)."""
    calls: CallLog = field(default_factory=CallLog)
    """The record of every call attempt (the `tool_trace`); its own lock."""
    warnings: list[str] = field(default_factory=list)
    """Host-side problems worth telling the agent (a server down, a stale tool list)."""
    catalog: Any = None
    """The tool host's frozen view of the servers for this run."""
    pii_vault: Any = None
    """The run's PII tokens (`wasmexec._tools.pii.PiiVault`), made by the tool host at its first call."""
    trace_id: str = field(default_factory=new_id)
    code_digest: str = ""
    principal: str | None = field(default_factory=PRINCIPAL.get)
    """Who the run acts for (audit lines name it), taken from the context that creates the state."""
    approver: Callable[[dict[str, Any]], bool] | None = None
    """Asks the user to approve a call (blocking; returns True to allow); None: nobody to ask."""
    progress: Callable[[str], Any] | None = None
    """Told about each tool call as it starts (the MCP server turns it into progress notifications)."""
    on_output: Callable[[str, str], Any] | None = None
    """Hears each accepted piece of printed output (level, text) as it comes, on the run thread."""
    sampling: Sampling = field(default_factory=Sampling)
    """`codemode.llm` calls: the sampler, their caps' counters; its own lock (`wasmexec._runctx.llm_ask`)."""
    approvals: list[str] = field(default_factory=list)
    """"APPROVED" or "DENIED", one per call that needed approval or was approved in advance; appended
    by the broker's event-loop thread (`approval.settle`), read by the run thread after `finish`."""
    journal: Journal | None = None
    """The journal of its calls when the server may pause it by replay, or it is a replay
    (`wasmexec._runctx.journal`); set before the run starts."""
    limits_hit: set[str] = field(default_factory=set)
    """Limits a host call reported to the guest (`limit-exceeded` errors): the host can vouch for
    them when the guest's report says one fired. Written on the run thread (see `hostcalls`)."""
    _in_flight: set[Future[Any]] = field(default_factory=set)
    _outcomes: dict[int, str | HostCallError | None] = field(default_factory=dict)
    """Handle → None while the call runs, then its outcome until the guest takes it."""
    _charges: dict[int, int] = field(default_factory=dict)
    """Handle → bytes charged to `_held` for it (arguments in flight, then the outcome)."""
    _held: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _handles: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def deadline(self) -> float:
        return self.started + self.limits.timeout_ms / 1000

    def remaining(self) -> float:
        """Seconds left until the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    # -- stopping ------------------------------------------------------------------------
    def should_stop(self) -> str | None:
        """The epoch callback's question: a reason to stop now, or None."""
        with self._changed:
            if self.stop_reason is None and time.monotonic() >= self.deadline:
                self.stop_reason = "timeout"
            return self.stop_reason

    def stop(self, reason: StopReason) -> None:
        """Asks the run to stop (cancellation, a refused blocking wait); wakes a guest blocked in `wait`."""
        with self._changed:
            if self.stop_reason is None:
                self.stop_reason = reason
            self._changed.notify_all()

    def interrupted(self, exc: BaseException) -> None:
        """A callback caught `exc` (e.g. KeyboardInterrupt): keep it for the owner and stop the run."""
        with self._changed:
            if self.interruption is None:
                self.interruption = exc
        self.stop("cancelled")

    # -- calls ---------------------------------------------------------------------------
    def next_handle(self) -> int:
        """A fresh handle number (the order of the tool trace), not yet reserved for a call."""
        with self._changed:
            return next(self._handles)

    def reserve(self, handle: int, argument_bytes: int) -> None:
        """Admits a call: one outstanding slot and its arguments' share of the run's memory.

        Raises:
            HostCallError: ``limit-exceeded`` when the run has too many calls outstanding, or the
                arguments would make the host hold more than the run's memory limit.
        """
        charge = argument_bytes * DECODED_JSON_FACTOR
        with self._changed:
            if len(self._outcomes) >= MAX_OUTSTANDING_CALLS:
                raise HostCallError(
                    "limit-exceeded", f"this run already has {MAX_OUTSTANDING_CALLS} calls outstanding "
                    f"(started and not yet awaited); at most {MAX_OUTSTANDING_CALLS} calls may be outstanding",
                    "Await calls before starting more (e.g. bound asyncio.gather with an asyncio.Semaphore).",
                    limit="tool_calls",
                )  # fmt: skip
            if self._held + charge > self.limits.memory_bytes:
                raise HostCallError(
                    "limit-exceeded", f"the arguments ({argument_bytes} bytes of JSON) need up to {charge} bytes "
                    f"of host memory while the call runs; with the {self._held} bytes this run's calls already "
                    f"hold, that passes the run's memory limit of {self.limits.memory_mb} MiB",
                    "Send less data per call, await calls before starting more, or ask for a higher memory_mb.",
                    limit="memory",
                )  # fmt: skip
            self._outcomes[handle] = None
            self._charges[handle] = charge
            self._held += charge

    def release(self, handle: int) -> None:
        """Forgets a call that could not start (its slot and its charge are free again)."""
        with self._changed:
            self._outcomes.pop(handle, None)
            self._held -= self._charges.pop(handle, 0)

    def outstanding(self) -> int:
        """Calls started and not yet collected by the guest."""
        with self._changed:
            return len(self._outcomes)

    def held_bytes(self) -> int:
        """Host memory charged to this run's calls (arguments in flight, uncollected outcomes)."""
        with self._changed:
            return self._held

    def track(self, future: Future[Any]) -> None:
        """Remembers a call in flight, to cancel it if the run ends first (forgotten once done)."""
        with self._changed:
            self._in_flight.add(future)
        future.add_done_callback(self._untrack)

    def _untrack(self, future: Future[Any]) -> None:
        with self._changed:  # a done future holds its result: drop it, the outcome is in `_outcomes`
            self._in_flight.discard(future)

    def finish(self) -> None:
        """Cancels every call still in flight and closes the call log (the run is over)."""
        self.calls.close()
        with self._changed:
            in_flight = list(self._in_flight)
            self._in_flight.clear()
        for future in in_flight:
            future.cancel()

    @property
    def tool_trace(self) -> list[ToolTraceEntry]:
        return self.calls.trace()

    def complete(self, handle: int, outcome: str | HostCallError) -> None:
        """Records a call's outcome (JSON text or an error), from any thread.

        An outcome that would make the run hold more than its memory limit is dropped for an error.
        """
        with self._changed:
            if handle not in self._outcomes or self._outcomes[handle] is not None:
                return
            self._held -= self._charges.pop(handle, 0)
            size = sys.getsizeof(outcome) if isinstance(outcome, str) else sys.getsizeof(outcome.message)
            if self._held + size > self.limits.memory_bytes:
                outcome = HostCallError(
                    "limit-exceeded", f"the call's result ({size} bytes) was dropped: this run already holds "
                    f"{self._held} bytes of results it has not collected (memory limit {self.limits.memory_mb} MiB)",
                    "Await results as they arrive (asyncio.as_completed) instead of starting many large calls.",
                    limit="memory",
                )  # fmt: skip
                size = sys.getsizeof(outcome.message)
            self._outcomes[handle] = outcome
            self._charges[handle] = size
            self._held += size
            self._changed.notify_all()

    def wait(self, handles: list[int], timeout_s: float) -> list[tuple[int, str | HostCallError]]:
        """Blocks until one of `handles` completes, the timeout, the deadline or a stop.

        Unknown handles (never started, or already collected) come back at once as ``not-found``.
        Costs O(len(handles)) per wake-up; `handles` is bounded first.

        Raises:
            HostCallError: ``limit-exceeded`` when `handles` is longer than the calls outstanding
                plus `WAIT_HANDLE_MARGIN` (checked before any other work).
        """
        outstanding = self.outstanding()
        if len(handles) > outstanding + WAIT_HANDLE_MARGIN:
            raise HostCallError(
                "limit-exceeded", f"wait() got {len(handles)} handles, but this run has only {outstanding} calls "
                f"outstanding (at most {outstanding + WAIT_HANDLE_MARGIN} handles are accepted)",
                "Wait only on handles returned by start_call and not yet completed.", limit="payload_bytes",
            )  # fmt: skip
        unique = list(dict.fromkeys(handles))
        until = time.monotonic() + min(timeout_s, self.remaining())
        with self._changed:
            while True:
                ready = self._collect(unique)
                if ready or self._should_stop_locked():
                    return ready
                left = until - time.monotonic()
                if left <= 0:
                    return []
                if self.journal is not None:  # the guest starts nothing until it wakes: a pause may snapshot
                    self.journal.guest_busy(False)
                self._changed.wait(left)
                if self.journal is not None:
                    self.journal.guest_busy(True)

    def _should_stop_locked(self) -> bool:
        if self.stop_reason is None and time.monotonic() >= self.deadline:
            self.stop_reason = "timeout"
        return self.stop_reason is not None

    def _collect(self, handles: list[int]) -> list[tuple[int, str | HostCallError]]:
        ready: list[tuple[int, str | HostCallError]] = []
        for handle in handles:
            if handle not in self._outcomes:
                ready.append((handle, HostCallError("not-found", f"no pending call with handle {handle}")))
                continue
            outcome = self._outcomes[handle]
            if outcome is not None:
                del self._outcomes[handle]
                self._held -= self._charges.pop(handle, 0)
                ready.append((handle, outcome))
        return ready
