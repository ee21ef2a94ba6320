"""Wall-clock limits through wasmtime epochs.

A ticker thread advances an engine's epoch every `TICK_MS` while runs are active.
Each store gets a deadline callback (through wasmtime's C API, which wasmtime-py
does not wrap): every few ticks wasmtime asks it whether the run may go on, so a
run stops at its deadline or promptly after it is cancelled, and the reason is
known exactly. Epochs only interrupt wasm code; host functions that block check
the same deadline themselves (see `hostcalls`).

The callback never lets an exception out into wasmtime: an interrupt that lands in
it (Ctrl-C is delivered to whatever Python code runs next, and while a run is busy
that is usually this callback) is recorded on the run's state and traps the run.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from wasmexec._runctx import runstate as _runstate
from wasmexec._sandbox.wasmtime_internals import ffi

#: The clock's resolution: a busy loop overruns its deadline by at most about this.
TICK_MS = 10
#: How often (in ticks) a running store asks whether it was cancelled (a store may ask more often).
CHECK_EVERY_TICKS = 2

_CONTINUE = 0


class EpochTicker:
    """Advances one engine's epoch while at least one run is active."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._active = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> EpochTicker:
        with self._lock:
            self._active += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._tick, name="wasmexec-epoch", daemon=True)
                self._thread.start()
            self._wake.set()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._active -= 1

    def _tick(self) -> None:
        interval = TICK_MS / 1000
        while True:
            self._wake.wait()
            while self._active > 0:
                # Sleep first: a run's first check comes a tick after it started, so a short run sees no
                # callback and the woken ticker takes nothing from it (the GIL, a core) as it starts.
                time.sleep(interval)
                self._engine.increment_epoch()
            with self._lock:
                if self._active == 0:
                    self._wake.clear()


# Stop decisions of live stores and their check interval in ticks, by key; the C callback looks them up here.
_deciders: dict[int, tuple[Callable[[], str | None], int]] = {}
_keys = itertools.count(1)

_CALLBACK_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ffi.wasmtime_update_deadline_kind_t),
)
_FINALIZER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CALLBACK_TYPE  # type: ignore[untyped-decorator]
def _on_deadline(context: Any, data: int | None, delta: Any, kind: Any) -> int:
    try:
        try:
            decide, every = _deciders.get(data or 0, (None, CHECK_EVERY_TICKS))
            reason = decide() if decide is not None else "stopped"
        except Exception:
            reason = "internal error in the deadline check"
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: the run's owner re-raises it
            reason = _interrupted(exc)
        if reason is not None:
            error = ffi.wasmtime_error_new(f"wasmexec: {reason}".encode())
            return ctypes.cast(error, ctypes.c_void_p).value or 0
        delta[0] = every
        kind[0] = _CONTINUE
        return 0
    except BaseException:  # a second interrupt while handling the first: stop, never raise into wasmtime
        error = ffi.wasmtime_error_new(b"wasmexec: cancelled")
        return ctypes.cast(error, ctypes.c_void_p).value or 0


def _interrupted(exc: BaseException) -> str:
    run = _runstate.current()
    if run is not None:
        run.interrupted(exc)
    return "cancelled"


@_FINALIZER_TYPE  # type: ignore[untyped-decorator]
def _on_finalize(data: int | None) -> None:
    _deciders.pop(data or 0, None)


def watch_store(store: Any, decide: Callable[[], str | None], every_ticks: int = CHECK_EVERY_TICKS) -> None:
    """Calls `decide` every `every_ticks` ticks while `store` runs wasm; a returned reason traps the run.

    A run with a workspace asks on every tick: its quota check is cheap, and a write flood
    must stop within one tick.
    """
    key = next(_keys)
    _deciders[key] = (decide, every_ticks)
    ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), _on_deadline, key, _on_finalize)
    store.set_epoch_deadline(every_ticks)
