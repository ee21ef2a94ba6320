"""The native stack that guest code runs on: big enough for the wasm stack the engines allow.

Wasmtime runs wasm on the calling thread's native stack and stops it with a trap when it
has used `WASM_STACK_BYTES`; a thread whose own stack is smaller than that crashes the
whole process instead (a guard-page fault outside any trap site). CPython inside the guest
measures only its linear-memory stack (wasm has two stacks), which many C paths do not
touch, so its `RecursionError` comes late: with wasmtime's default 512 KiB, hashing,
printing, comparing or dropping a structure nested 2,000 deep trapped. With 64 MiB every
operation we measured at 100,000 deep either succeeds or raises `RecursionError`, as on
CPython (numbers in docs/stdlib.md).

So every call into a guest goes through `on_guest_stack`: on a thread of ours with a
`THREAD_STACK_BYTES` stack (wasm on top of the host frames below it, host calls on top of
the wasm). Such a thread's stack is virtual memory, touched only as deep as a run goes.

The threads are kept for the next call (up to `MAX_IDLE_THREADS` idle): starting one costs
about 50 µs and the first touches of its stack pages, a handoff to an idle one about 12 µs
(measured, /work/briefs/results-hostpath.md). Nothing of a call stays on its thread: the
run's bindings are context-managed thread-locals, and wasm cannot read the native stack. A
call that took longer than `RETIRE_AFTER_S` may have touched much of the stack, which an
idle thread would keep resident: its thread ends instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

#: The engines' ``max_wasm_stack``: deep enough for structures nested 100,000 deep (measured).
WASM_STACK_BYTES = 64 << 20
#: A guest thread's native stack: the wasm stack plus room for the host frames under and over it.
THREAD_STACK_BYTES = WASM_STACK_BYTES + (16 << 20)

#: Idle guest threads kept for later calls: about the runs a sandbox runs at once (8 by default).
MAX_IDLE_THREADS = 8
#: A call longer than this ends its thread afterwards (its stack may be deep and resident; 50 µs to replace).
RETIRE_AFTER_S = 0.05

T = TypeVar("T")

_local = threading.local()
_stack_size_lock = threading.Lock()
_idle: list[_GuestThread] = []
_idle_lock = threading.Lock()


def on_guest_stack(work: Callable[[], T]) -> T:
    """Returns ``work()``, run on a thread whose stack holds `WASM_STACK_BYTES` of wasm.

    On such a thread already: runs it here. Otherwise on an idle guest thread, or a new one
    (see the module), which the caller waits for; an exception of `work` is re-raised here.
    """
    if getattr(_local, "deep", False):
        return work()
    with _idle_lock:
        thread = _idle.pop() if _idle else None
    if thread is None:
        thread = _GuestThread()
    started = time.monotonic()
    outcome = thread.call(work)  # an interrupt while waiting leaves the thread to finish and end alone
    keep = time.monotonic() - started < RETIRE_AFTER_S
    with _idle_lock:
        keep = keep and len(_idle) < MAX_IDLE_THREADS
        if keep:
            _idle.append(thread)
    if not keep:
        thread.end()
    return outcome.result()


class _GuestThread:
    """A daemon thread with a guest-sized stack that runs one call at a time, handed over by locks."""

    def __init__(self) -> None:
        self._work: Callable[[], object] | None = None
        self._outcome: _Outcome[object] | None = None
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        thread = threading.Thread(target=self._serve, name="wasmexec-guest", daemon=True)
        with _stack_size_lock:  # the size is process-wide: set it for this start only
            previous = threading.stack_size(THREAD_STACK_BYTES)
            try:
                thread.start()
            finally:
                threading.stack_size(previous)

    def call(self, work: Callable[[], T]) -> _Outcome[T]:
        """Runs `work` on the thread and waits for it; its outcome (the thread is free again)."""
        self._work = work
        self._go.release()
        self._done.acquire()
        outcome, self._outcome = self._outcome, None  # nothing of the call stays with the thread
        assert outcome is not None
        return outcome  # type: ignore[return-value]

    def end(self) -> None:
        self._work = None
        self._go.release()

    def _serve(self) -> None:
        _local.deep = True
        while True:
            self._go.acquire()
            work, self._work = self._work, None
            if work is None:
                return
            try:
                self._outcome = _Outcome(work(), None)
            except BaseException as exc:
                self._outcome = _Outcome(None, exc)
            del work
            self._done.release()


@dataclass
class _Outcome(Generic[T]):
    value: T | None
    failure: BaseException | None

    def result(self) -> T:
        if self.failure is not None:
            raise self.failure
        return self.value  # type: ignore[return-value]
