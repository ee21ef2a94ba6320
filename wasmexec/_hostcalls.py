"""The host side of the WIT `host` interface, and the state of one run that it needs.

The functions are registered on the linker once per engine. wasmtime calls them
on the thread that is running the guest, so the current run is found through a
thread-local (`bind`). They never raise into wasm: failures go back as WIT
``host-error`` values.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from wasmtime.component import Record

from wasmexec._envelope import LimitName, ToolTraceEntry
from wasmexec._limits import Limits

#: The largest JSON payload a single host call accepts or returns; bigger is a limit error.
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024

INTERFACE = "wasmexec:sandbox/host@0.1.0"


class HostCallError(Exception):
    """A host call failed; becomes a WIT ``host-error`` (kind, message, hint, detail)."""

    def __init__(self, kind: str, message: str, hint: str = "", **detail: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint
        self.detail = detail


class ToolHost(Protocol):
    """What answers the guest's catalog queries and tool calls (the broker)."""

    def catalog(self, run: RunState, op: str, request: Any) -> Any:
        """Answers a discovery query; raises HostCallError."""

    def start_call(self, run: RunState, handle: int, server_id: str, tool_name: str, arguments: Any) -> None:
        """Starts a call and later reports it with `run.complete(handle, ...)`; raises HostCallError."""


class NoTools:
    """The tool host of a sandbox with no MCP servers configured."""

    def catalog(self, run: RunState, op: str, request: Any) -> Any:
        if op == "list_servers":
            return []
        raise HostCallError(
            "not-found", "no MCP servers are configured", "Configure servers on the host (--config).", what="server"
        )

    def start_call(self, run: RunState, handle: int, server_id: str, tool_name: str, arguments: Any) -> None:
        self.catalog(run, "get_server", {"server_id": server_id})


@dataclass
class RunState:
    """What the host knows about one running guest; shared with the broker's threads."""

    limits: Limits
    tools: ToolHost
    run_id: str
    started: float = field(default_factory=time.monotonic)
    stop_reason: LimitName | None = None
    tool_calls: int = 0
    tool_trace: list[ToolTraceEntry] = field(default_factory=list)
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
        """Cancels every call still in flight (the run is over)."""
        for future in self._in_flight:
            future.cancel()
        self._in_flight.clear()

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


_local = threading.local()


@contextmanager
def bind(run: RunState) -> Iterator[None]:
    """Makes `run` the current run of this thread while the guest executes."""
    _local.run = run
    try:
        yield
    finally:
        _local.run = None


def _current() -> RunState:
    run: RunState | None = getattr(_local, "run", None)
    if run is None:
        raise HostCallError("internal", "host call outside of a run")
    return run


def _record(**fields: Any) -> Record:
    record = Record()
    for name, value in fields.items():
        setattr(record, name.replace("_", "-"), value)
    return record


# wasmtime-py lowers a WIT `result` whose ok and err types are told apart by Python type
# (str or int vs Record) from the bare value; a `Variant` is only for ambiguous results.
def _ok(value: Any) -> Any:
    return value


def _err(record: Record) -> Record:
    return record


def _error_value(error: HostCallError) -> Record:
    return _record(
        kind=error.kind,
        message=error.message,
        hint=error.hint,
        detail_json=json.dumps(error.detail) if error.detail else "",
    )


def _decode(payload: str, what: str) -> Any:
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise HostCallError(
            "limit-exceeded",
            f"{what} is {len(payload)} bytes; the limit is {MAX_PAYLOAD_BYTES}",
            "Send less data per call.",
            limit="payload_bytes",
        )
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise HostCallError("invalid-argument", f"{what} is not valid JSON: {exc}") from None


def encode_payload(value: Any, what: str) -> str:
    """Compact JSON of a host call's answer; a `payload_bytes` limit error when too large."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if len(text) > MAX_PAYLOAD_BYTES:
        raise HostCallError(
            "limit-exceeded",
            f"{what} is {len(text)} bytes; the limit is {MAX_PAYLOAD_BYTES}",
            "Ask for less (filter, paginate, lower detail).",
            limit="payload_bytes",
        )
    return text


def host_catalog(store: Any, op: str, request_json: str) -> Any:
    try:
        run = _current()
        return _ok(encode_payload(run.tools.catalog(run, op, _decode(request_json, "the request")), "the answer"))
    except HostCallError as error:
        return _err(_error_value(error))
    except Exception as exc:
        return _err(_error_value(HostCallError("internal", f"host error: {type(exc).__name__}: {exc}")))


def host_start_call(store: Any, server_id: str, tool_name: str, arguments_json: str) -> Any:
    try:
        run = _current()
        arguments = _decode(arguments_json, "the arguments")
        if run.tool_calls >= run.limits.max_tool_calls:
            raise HostCallError(
                "limit-exceeded",
                f"this run may make at most {run.limits.max_tool_calls} tool calls",
                "Make fewer calls per run (batch, filter, or split the work).",
                limit="tool_calls",
            )
        run.tool_calls += 1
        handle = run.new_handle()
        run.tools.start_call(run, handle, server_id, tool_name, arguments)
        return _ok(handle)
    except HostCallError as error:
        return _err(_error_value(error))
    except Exception as exc:
        return _err(_error_value(HostCallError("internal", f"host error: {type(exc).__name__}: {exc}")))


def host_wait(store: Any, handles: list[int], timeout_ms: int) -> list[Record]:
    try:
        ready = _current().wait(list(handles), timeout_ms / 1000)
    except Exception as exc:
        error = HostCallError("internal", f"host error: {type(exc).__name__}: {exc}")
        return [_record(handle=h, outcome=_err(_error_value(error))) for h in handles]
    return [
        _record(
            handle=handle,
            outcome=_err(_error_value(outcome)) if isinstance(outcome, HostCallError) else _ok(outcome),
        )
        for handle, outcome in ready
    ]


class BlockingWaitRefused(Exception):
    """The guest asked WASI to block on a clock, which no deadline could interrupt."""


def _refuse_blocking_wait(store: Any, *args: Any) -> Any:
    # Raising here traps the guest; wasmtime-py re-raises this exception from the export call.
    raise BlockingWaitRefused("a blocking WASI clock wait was refused")


def register(linker: Any, monotonic_clock: str | None = None) -> None:
    """Adds the host interface to a component linker, and disarms WASI's blocking clock waits.

    Epochs cannot interrupt a wait inside WASI, so a wait that bypasses the host's `wait`
    (a re-imported `time.sleep`, `select`, a lock with a timeout) would hold the run past
    its deadline. `monotonic_clock` names the component's monotonic-clock import; its
    `subscribe-*` functions then trap instead of blocking (`now` keeps working).
    """
    with linker.root() as root, root.add_instance(INTERFACE) as instance:
        instance.add_func("catalog", host_catalog)
        instance.add_func("start-call", host_start_call)
        instance.add_func("wait", host_wait)
    if monotonic_clock is None:
        return
    linker.allow_shadowing = True
    with linker.root() as root, root.add_instance(monotonic_clock) as clock:
        clock.add_func("now", lambda store: time.monotonic_ns())
        clock.add_func("resolution", lambda store: 1)
        clock.add_func("subscribe-duration", _refuse_blocking_wait)
        clock.add_func("subscribe-instant", _refuse_blocking_wait)
    linker.allow_shadowing = False
