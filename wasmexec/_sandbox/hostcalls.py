"""The host side of the WIT `host` interface: the guest's only way out of the sandbox.

The functions are registered on the linker once per engine. wasmtime calls them
on the thread that is running the guest, so the current run is found through a
thread-local (`bind`). They never raise into wasm: failures go back as WIT
``host-error`` values.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from wasmtime.component import Record

from wasmexec._runstate import RunState
from wasmexec._toolhost import MAX_PAYLOAD_BYTES, HostCallError, encode_payload, internal_error

#: The WIT interface the guest imports (wasm_assets/wit/world.wit).
INTERFACE = "wasmexec:sandbox/host@0.1.0"

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


def host_catalog(store: Any, op: str, request_json: str) -> Any:
    try:
        run = _current()
        return _ok(encode_payload(run.tools.catalog(run, op, _decode(request_json, "the request")), "the answer"))
    except HostCallError as error:
        return _err(_error_value(error))
    except Exception as exc:
        return _err(_error_value(internal_error(exc)))


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
        return _err(_error_value(internal_error(exc)))


def host_wait(store: Any, handles: list[int], timeout_ms: int) -> list[Record]:
    try:
        ready = _current().wait(list(handles), timeout_ms / 1000)
    except Exception as exc:
        error = internal_error(exc)
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
