"""The host side of the WIT `host` interface: the guest's only way out of the sandbox.

The functions are registered on the linker once per engine. wasmtime calls them
on the thread that is running the guest, so the current run is found through a
thread-local (`bind`).

Everything the guest sends is hostile, and epochs cannot interrupt host code, so
every function checks the sizes of its arguments before it decodes, looks up or
computes anything (each argument's bound in the host-call contract, `contract.FUNCTIONS`,
and the run's caps on outstanding calls and held memory). wasmtime-py lifts every
argument into Python before calling a host function (a string is copied and decoded,
about 3 ms per MB; a list is converted element by element, about 2.5 µs each), so each
function sits behind a small C trampoline (`_trampoline`) that drops an argument over its byte or length bound
unread, and the function refuses it by its size.

No exception ever leaves these functions into wasmtime. wasmtime-py's trampoline
(``wasmtime/component/_enter.py``, ``catch_exceptions``) parks any exception other
than a `WasmtimeError` in one process-global slot (``LAST_EXCEPTION``), where the
next failing wasm call on *any* thread picks it up: another run could get this
run's error; and it lets a KeyboardInterrupt escape into C, which crashes the
process. So failures go back as WIT ``host-error`` values, and where the guest must
stop at once (a refused blocking wait, an interrupt) the reason is recorded on the
run's state and the call traps with a `WasmtimeError`, which is handed to wasmtime
as an error pointer and never parked. Every function here is entered through
`_dispatch`, our own version of wasmtime-py's trampoline that catches
BaseException around the lifting, the call and the lowering alike.
"""

from __future__ import annotations

import ctypes
import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from wasmtime import StoreContext, WasmtimeError
from wasmtime.component import Record

from wasmexec._envelope import StopReason, valid_text  # a WIT string cannot carry a lone surrogate
from wasmexec._runctx import runstate as _runstate
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import MAX_NAME_CHARS, MAX_PAYLOAD_BYTES, HostCallError, encode_payload, internal_error
from wasmexec._sandbox.contract import (
    ENUMS,
    ERROR_KINDS,
    FUNCTIONS,
    INTERFACE,
    MAX_OP_CHARS,
    MAX_REQUEST_BYTES,
    MAX_WAIT_HANDLES,
    bounds,
)
from wasmexec._sandbox.wasmtime_internals import (
    component_linker,
    error_from_pointer,
    error_pointer,
    ffi,
    func_type,
    invalidate,
    lift_params,
    lower_result,
)

#: How much of a refused call's names goes into the tool trace and the audit log.
TRACED_NAME_CHARS = 200

#: A floor on how fast the host decodes JSON (measured: about 5 MB/s for the slowest shape, a list
#: of empty objects, on a loaded 2-core machine); arguments that might not be decoded before the
#: run's deadline are refused, since no epoch can stop the decoder.
MIN_DECODE_BYTES_PER_S = 4 * 1024 * 1024
#: Arguments this small are always decoded (a few ms at worst), whatever time is left.
ALWAYS_DECODED_BYTES = 64 * 1024
_KINDS = frozenset(ERROR_KINDS)
_CALL_KINDS = frozenset(ENUMS["call-kind"])


class _Dropped(threading.local):
    """Per thread: the arguments the trampoline dropped for the host call now running (index → size)."""

    sizes: dict[int, int] = {}  # noqa: RUF012 (a fresh dict is assigned per call)


_dropped = _Dropped()


def _take_dropped() -> dict[int, int]:
    sizes, _dropped.sizes = _dropped.sizes, {}
    return sizes


def note_dropped(sizes: dict[int, int]) -> None:
    """Tells the host function about to run which arguments were dropped unread (index → size),
    as the trampoline does: for the science door, which bounds its arguments itself."""
    _dropped.sizes = sizes


@contextmanager
def bind(run: RunState) -> Iterator[None]:
    """Makes `run` the current run of this thread while the guest executes."""
    _dropped.sizes = {}
    with _runstate.bound(run):
        yield


def _current() -> RunState:
    run = _runstate.current()
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
    limit = error.detail.get("limit") if error.kind == "limit-exceeded" else None
    run = _runstate.current()
    if isinstance(limit, str) and run is not None:
        run.limits_hit.add(limit[:64])  # the guest will report it; the result builder checks it was ours
    try:
        detail = json.dumps(error.detail, default=repr) if error.detail else ""
    except (TypeError, ValueError, RecursionError):
        detail = ""
    return _record(
        kind=error.kind if error.kind in _KINDS else "internal",
        message=valid_text(str(error.message)),
        hint=valid_text(str(error.hint)),
        detail_json=detail,
    )


def _trap(reason: StopReason) -> WasmtimeError:
    """The one exception a host function may raise: wasmtime-py returns it to wasmtime unparked."""
    return WasmtimeError(f"wasmexec: {reason}")


def interrupted(exc: BaseException) -> WasmtimeError:
    """Records an interrupt (KeyboardInterrupt, SystemExit) on the current run and traps its guest."""
    run = _runstate.current()
    if run is not None:
        run.interrupted(exc)
    return _trap("cancelled")


def _host_function(on_error: Callable[[HostCallError, tuple[Any, ...]], Any]) -> Callable[..., Any]:
    """Wraps a host function so that nothing but a trap leaves it; `on_error` turns an error into a value."""

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def guarded(store: Any, *args: Any) -> Any:
            try:
                try:
                    return func(store, *args)
                except WasmtimeError:
                    raise
                except HostCallError as error:
                    return on_error(error, args)
                except Exception as exc:
                    return on_error(internal_error(exc), args)
            except WasmtimeError:
                raise
            except Exception as exc:  # on_error itself failed: a host bug, still never parked
                raise WasmtimeError(f"wasmexec: internal host error: {type(exc).__name__}") from None
            except BaseException as exc:  # KeyboardInterrupt, SystemExit
                raise interrupted(exc) from None

        return guarded

    return wrap


def _error_result(error: HostCallError, args: tuple[Any, ...]) -> Record:
    return _err(_error_value(error))


def _name_error(what: str, text: str, dropped: int | None) -> HostCallError | None:
    """A name over `MAX_NAME_CHARS` (or dropped unread at `dropped` bytes) as an error, else None."""
    if dropped is None and len(text) <= MAX_NAME_CHARS:
        return None
    size = f"{dropped} bytes" if dropped is not None else f"{len(text)} characters"
    return HostCallError("invalid-argument", f"{what} is {size}; names are at most {MAX_NAME_CHARS} characters",
                         "Use the names from discovery.list_servers() and discovery.list_tools().",
                         limit="payload_bytes")  # fmt: skip


def _payload_error(what: str, text: str, dropped: int | None, limit: int) -> HostCallError | None:
    """A JSON payload over `limit` (or dropped unread at `dropped` bytes) as an error, else None."""
    size = dropped if dropped is not None else len(text)
    if dropped is None and size <= limit:
        return None
    return HostCallError("limit-exceeded", f"{what} is {size} bytes; the limit is {limit}",
                         "Send less data per call.", limit="payload_bytes")  # fmt: skip


def _decode(payload: str, what: str, limit: int = MAX_PAYLOAD_BYTES, dropped: int | None = None) -> Any:
    error = _payload_error(what, payload, dropped, limit)
    if error is not None:
        raise error
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise HostCallError("invalid-argument", f"{what} is not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise HostCallError("invalid-argument", f"{what} is nested too deeply") from None


@_host_function(_error_result)
def host_catalog(store: Any, op: str, request_json: str) -> Any:
    dropped = _take_dropped()
    run = _current()
    if 0 in dropped or len(op) > MAX_OP_CHARS:
        size = f"{dropped[0]} bytes" if 0 in dropped else f"{len(op)} characters"
        raise HostCallError("invalid-argument", f"unknown catalog operation {op[:MAX_OP_CHARS]!r}… "
                            f"({size}; the limit is {MAX_OP_CHARS} characters)")  # fmt: skip
    request = _decode(request_json, "the request", MAX_REQUEST_BYTES, dropped.get(1))
    return _ok(encode_payload(run.tools.catalog(run, op, request), "the answer"))


def _refuse(run: RunState, handle: int, server_id: str, tool_name: str, error: HostCallError) -> HostCallError:
    """Traces and audits a call refused before the tool host saw it; returns the error to raise."""
    server_id, tool_name = server_id[:TRACED_NAME_CHARS], tool_name[:TRACED_NAME_CHARS]
    run.calls.refused(handle, server_id, tool_name, f"{error.kind}: {error.message}")
    run.tools.refused(run, server_id, tool_name, error)
    return error


def _admit(run: RunState, server_id: str, tool_name: str, arguments_json: str, dropped: dict[int, int]) -> int:
    """Counts the call and checks every size and cap before any work; returns its reserved handle."""
    if run.tool_calls >= run.limits.max_tool_calls:
        run.calls_over_cap += 1
        over = HostCallError(
            "limit-exceeded", f"this run may make at most {run.limits.max_tool_calls} tool calls",
            "Make fewer calls per run (batch, filter, or split the work).", limit="tool_calls",
        )  # fmt: skip
        if run.calls_over_cap == 1:  # traced once: a guest looping past the cap must not grow the trace
            _refuse(run, run.next_handle(), server_id, tool_name, over)
        raise over
    run.tool_calls += 1
    handle = run.next_handle()
    error = (
        _name_error("server_id", server_id, dropped.get(0))
        or _name_error("tool_name", tool_name, dropped.get(1))
        or _payload_error("the arguments", arguments_json, dropped.get(2), MAX_PAYLOAD_BYTES)
    )
    try:
        if error is not None:
            raise error
        _check_decode_time(run, len(arguments_json))
        run.reserve(handle, len(arguments_json))
    except HostCallError as refused:
        raise _refuse(run, handle, server_id, tool_name, refused) from None
    return handle


def _check_decode_time(run: RunState, size: int) -> None:
    left = run.remaining()
    if size > ALWAYS_DECODED_BYTES and size > left * MIN_DECODE_BYTES_PER_S:
        raise HostCallError(
            "limit-exceeded", f"the arguments ({size} bytes of JSON) might not be decoded before the run's "
            f"deadline ({left:.2f} s left)", "Send less data per call, or make big calls early in the run.",
            limit="timeout",
        )  # fmt: skip


@_host_function(_error_result)
def host_start_call(store: Any, server_id: str, tool_name: str, arguments_json: str, kind: Any = "tool") -> Any:
    dropped = _take_dropped()
    run = _current()
    handle = _admit(run, server_id, tool_name, arguments_json, dropped)
    try:
        try:
            arguments = _decode(arguments_json, "the arguments")
        except HostCallError as error:
            raise _refuse(run, handle, server_id, tool_name, error) from None
        if kind not in _CALL_KINDS:  # wasmtime-py lifts the enum to its case name; anything else is a bug
            raise _refuse(run, handle, server_id, tool_name, HostCallError("invalid-argument", "unknown call kind"))
        run.tools.start_call(run, handle, server_id, tool_name, arguments, kind=kind)
    except BaseException:
        run.release(handle)
        raise
    return _ok(handle)


@_host_function(_error_result)
def host_start_sample(store: Any, prompt: str, system: str, max_tokens: int) -> Any:
    # The sizes were bounded by the trampoline; caps and the rest are checked in `_sampling`.
    dropped = _take_dropped()
    run = _current()
    handle = run.sampling.admit(run, prompt, system, max_tokens, dropped)
    try:
        run.sampling.start(run, handle, prompt, system)
    except BaseException:
        run.release(handle)
        raise
    return _ok(handle)


def _wait_failed(error: HostCallError, args: tuple[Any, ...]) -> list[Record]:
    # One error per handle (the bridge resolves its futures with it), or for handle 0 when the
    # list was dropped unread; handle 0 is never a call's.
    handles = args[0] if args and isinstance(args[0], list) else []
    return [_record(handle=h, outcome=_err(_error_value(error))) for h in dict.fromkeys(handles or [0])]


@_host_function(_wait_failed)
def host_wait(store: Any, handles: list[int], timeout_ms: int) -> list[Record]:
    dropped = _take_dropped()
    run = _current()
    if 0 in dropped:
        raise HostCallError(
            "limit-exceeded", f"wait() got {dropped[0]} handles; at most {MAX_WAIT_HANDLES} are accepted",
            "Wait only on handles returned by start_call and not yet completed.", limit="payload_bytes",
        )  # fmt: skip
    ready = run.wait(handles, timeout_ms / 1000)
    return [
        _record(
            handle=handle,
            outcome=_err(_error_value(outcome)) if isinstance(outcome, HostCallError) else _ok(valid_text(outcome)),
        )
        for handle, outcome in ready
    ]


def _trampoline(bounds: tuple[int | None, ...]) -> Any:
    """A C callback for a host function that drops each argument over its bound (string bytes,
    list items) before wasmtime-py lifts it, notes its size in `_dropped`, then runs wasmtime-py's
    own trampoline. Raises nothing: whatever goes wrong, the host function still runs."""

    @ffi.wasmtime_component_func_callback_t  # type: ignore[untyped-decorator]
    def trampoline(data: Any, context: Any, ty: Any, args: Any, nargs: int, results: Any, nresults: int) -> int:
        try:
            sizes: dict[int, int] = {}
            for index, bound in enumerate(bounds[:nargs]):
                value = args[index]
                if bound is None:
                    continue
                if value.kind == ffi.WASMTIME_COMPONENT_STRING.value and value.of.string.size > bound:
                    sizes[index] = value.of.string.size
                    # Keep a short prefix for the trace; never empty: wasmtime-py cannot lift an empty vec.
                    head = ctypes.string_at(value.of.string.data, TRACED_NAME_CHARS).decode("utf-8", "ignore")
                    ffi.wasm_byte_vec_delete(ctypes.byref(value.of.string))  # the callee owns its arguments
                    value.of.string = ffi.bytes_to_capi(head.encode() or b"-")
                elif value.kind == ffi.WASMTIME_COMPONENT_LIST.value and value.of.list.size > bound:
                    sizes[index] = value.of.list.size
                    ffi.wasmtime_component_vallist_delete(ctypes.byref(value.of.list))
                    ffi.wasmtime_component_vallist_new_empty(ctypes.byref(value.of.list))
            _dropped.sizes = sizes
        except BaseException:
            _dropped.sizes = {}
        return _dispatch(data, context, ty, args, nargs, results, nresults)

    return trampoline


def _dispatch(data: Any, context: Any, ty: Any, args: Any, nargs: int, results: Any, nresults: int) -> int:
    """wasmtime-py's `func_impl` (`wasmtime_internals`), except that nothing escapes: returns 0 or a trap."""
    try:
        store = StoreContext(context)
        try:
            with func_type(ty, store) as signature:
                func = component_linker.FUNCTIONS.get(data or 0)
                result = func(store, *lift_params(signature, args, nargs))
                lower_result(signature, store, result, results)
            return 0
        except WasmtimeError as error:
            trap = error
        except Exception as exc:  # a host bug, or a value wasmtime-py cannot lower
            trap = WasmtimeError(f"wasmexec: internal host error: {type(exc).__name__}: {exc}"[:300])
        except BaseException as exc:  # KeyboardInterrupt, SystemExit
            trap = interrupted(exc)
        finally:
            invalidate(store)
        return error_pointer(trap)
    except BaseException:  # a second interrupt while handling the first: trap, never raise into C
        return ctypes.cast(ffi.wasmtime_error_new(b"wasmexec: cancelled"), ctypes.c_void_p).value or 0


# Module-level, so the C callbacks live as long as any linker that uses them.
_PLAIN_TRAMPOLINE = _trampoline(())
#: Each host function's trampoline, dropping its arguments over their bounds in the contract.
_TRAMPOLINES = {name: _trampoline(bounds(name)) for name in FUNCTIONS}
#: The host functions by WIT name (the contract's functions, each once).
HOST_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "catalog": host_catalog,
    "start-call": host_start_call,
    "start-sample": host_start_sample,
    "wait": host_wait,
}


def _add_func(instance: Any, name: str, func: Callable[..., Any], trampoline: Any = _PLAIN_TRAMPOLINE) -> None:
    """`LinkerInstance.add_func` with our own C trampoline instead of wasmtime-py's (wasmtime-py 50)."""
    name_bytes = name.encode()
    data = component_linker.FUNCTIONS.allocate(func)
    error = ffi.wasmtime_component_linker_instance_add_func(
        instance.ptr(), ctypes.create_string_buffer(name_bytes), len(name_bytes), trampoline, data,
        component_linker.func_finalize,
    )  # fmt: skip
    if error:
        raise error_from_pointer(error)


def _refuse_blocking_wait(store: Any, *args: Any) -> Any:
    # Traps without parking an exception (see the module docstring); the run's stop reason says why.
    run = _runstate.current()
    if run is not None:
        run.stop("blocking_wait")
    raise _trap("blocking_wait")


def register(linker: Any, monotonic_clock: str | None = None) -> None:
    """Adds the host interface to a component linker, and disarms WASI's blocking clock waits.

    Epochs cannot interrupt a wait inside WASI, so a wait that bypasses the host's `wait`
    (a re-imported `time.sleep`, `select`, a lock with a timeout) would hold the run past
    its deadline. `monotonic_clock` names the component's monotonic-clock import; its
    `subscribe-*` functions then trap instead of blocking (`now` keeps working).
    """
    with linker.root() as root, root.add_instance(INTERFACE) as instance:
        for name, function in HOST_FUNCTIONS.items():
            _add_func(instance, name, function, _TRAMPOLINES[name])
    if monotonic_clock is None:
        return
    linker.allow_shadowing = True
    with linker.root() as root, root.add_instance(monotonic_clock) as clock:
        _add_func(clock, "now", lambda store: time.monotonic_ns())
        _add_func(clock, "resolution", lambda store: 1)
        _add_func(clock, "subscribe-duration", _refuse_blocking_wait)
        _add_func(clock, "subscribe-instant", _refuse_blocking_wait)
    linker.allow_shadowing = False
