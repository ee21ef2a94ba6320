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
The process's main thread runs calls itself when its stack can grow that far (`main_thread_fits`:
Linux grows it on demand up to the stack rlimit, which is raised to fit when the hard limit
allows, and the address space below it must be free): handing a call to another thread and back
costs two wake-ups, 0.1–0.3 ms each on an idle VM, more than a trivial run on a spare. Like a
kept guest thread, the main thread then keeps the stack pages a deep run touched.

The threads are kept for the next call (`GuestThreads`: up to `MAX_IDLE_THREADS` idle for
`on_guest_stack`; a server's run threads are another such pool): starting one costs about
50 µs and the first touches of its stack pages, a handoff to an idle one about 12 µs
(benchmarks/README.md). Nothing of a call stays on its thread: the
run's bindings are context-managed thread-locals, and wasm cannot read the native stack. A
call that took longer than `RETIRE_AFTER_S` may have touched much of the stack, which an
idle thread would keep resident: its thread ends instead.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Generic, TypeVar

#: The engines' ``max_wasm_stack``: deep enough for structures nested 100,000 deep (measured).
WASM_STACK_BYTES = 64 << 20
#: A guest thread's native stack: the wasm stack plus room for the host frames under and over it.
THREAD_STACK_BYTES = WASM_STACK_BYTES + (16 << 20)

#: Idle guest threads kept for later calls: about the runs a sandbox runs at once (8 by default).
MAX_IDLE_THREADS = 8
#: How long an idle guest thread of `on_guest_stack` waits for another call before it ends.
GUEST_THREAD_IDLE_S = 30.0
#: A call longer than this ends its thread afterwards (its stack may be deep and resident; 50 µs to replace).
RETIRE_AFTER_S = 0.05
#: How long an idle `GuestThreads` thread waits for more work before it ends.
RUN_THREAD_IDLE_S = 2.0
#: Idle `GuestThreads` threads kept at most: each keeps the stack pages its work touched resident.
MAX_IDLE_RUN_THREADS = 2

T = TypeVar("T")

#: Kept free below the main thread's stack by the kernel (``stack_guard_gap``, 256 pages) and by us (slack).
_BELOW_MAIN_STACK_BYTES = 8 << 20

_local = threading.local()
_stack_size_lock = threading.Lock()
_main = threading.main_thread()
_main_fits: bool | None = None


def on_guest_stack(work: Callable[[], T]) -> T:
    """Returns ``work()``, run on a thread whose stack holds `WASM_STACK_BYTES` of wasm.

    On such a thread already (a guest thread, or the main thread when it fits: `main_thread_fits`):
    runs it here. Otherwise on an idle guest thread, or a new one (see the module), which the caller
    waits for, in a copy of the caller's context (its context variables, e.g. a `spares.holding`); an
    exception of `work` is re-raised here.
    """
    if getattr(_local, "deep", False) or (threading.current_thread() is _main and main_thread_fits()):
        return work()
    call = _Call(work)
    start_on_guest_stack(call.run)  # an interrupt while waiting leaves the thread to finish alone
    call.done.acquire()
    return call.result()


def start_on_guest_stack(work: Callable[[], object]) -> None:
    """Starts ``work()`` on an idle guest thread (or a new one) in a copy of the caller's context, and returns
    at once: for a caller that learns of the end by itself (an event loop, which must not block). `work`
    must catch its own exceptions."""
    _GUEST_THREADS.submit(partial(contextvars.copy_context().run, work))


def main_thread_fits() -> bool:
    """Whether the process's main thread can hold a guest call on its own stack (decided once, see the module).

    It must be the process's first thread (its stack is the ``[stack]`` mapping that grows on demand),
    the address space below that mapping must be free for `THREAD_STACK_BYTES` more, and the soft stack
    rlimit must allow it: raised to fit if it does not (children inherit the raised soft limit).
    """
    global _main_fits
    if _main_fits is None:
        with _stack_size_lock:
            if _main_fits is None:
                _main_fits = _grow_main_stack()
    return _main_fits


def _grow_main_stack() -> bool:
    if not sys.platform.startswith("linux") or threading.current_thread() is not _main:
        return False
    try:
        if threading.get_native_id() != os.getpid():  # an embedded interpreter's "main" thread: not the first
            return False
        mapped = _main_stack_mapping()
        if mapped is None:
            return False
        top, bottom, below = mapped
        need = top - bottom + THREAD_STACK_BYTES  # what it uses now, and a guest thread's whole stack
        if top - below < need + _BELOW_MAIN_STACK_BYTES:
            return False
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        if soft == resource.RLIM_INFINITY or soft >= need:
            return True
        if hard != resource.RLIM_INFINITY and hard < need:
            return False
        resource.setrlimit(resource.RLIMIT_STACK, (need, hard))
        return True
    except (OSError, ValueError):
        return False


def _main_stack_mapping() -> tuple[int, int, int] | None:
    """The main thread's stack mapping as (top, bottom) and where the nearest mapping below it ends."""
    below = 0
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            start_text, _, rest = line.partition("-")
            end_text = rest.split(" ", 1)[0]
            start, end = int(start_text, 16), int(end_text, 16)
            if line.rstrip().endswith("[stack]"):
                return end, start, below
            below = end  # the file lists mappings in address order
    return None


class _Call(Generic[T]):
    """One waited-for call: its outcome stays here, never with the thread that ran it."""

    def __init__(self, work: Callable[[], T]) -> None:
        self.work: Callable[[], T] | None = work
        self.value: T | None = None
        self.failure: BaseException | None = None
        self.done = threading.Lock()
        self.done.acquire()

    def run(self) -> None:
        work, self.work = self.work, None
        try:
            assert work is not None
            self.value = work()
        except BaseException as exc:
            self.failure = exc
        finally:
            self.done.release()

    def result(self) -> T:
        if self.failure is not None:
            raise self.failure
        return self.value  # type: ignore[return-value]


def guest_thread(target: Callable[[], object], *, name: str) -> threading.Thread:
    """Starts and returns a daemon thread that runs `target` with a guest-sized stack.

    Guest calls made on it (`on_guest_stack`) run in place: a caller that needs a thread of its
    own anyway (a server's run) starts it here and saves the second thread per run.
    """

    def body() -> None:
        _local.deep = True
        target()

    thread = threading.Thread(target=body, name=name, daemon=True)
    with _stack_size_lock:  # the size is process-wide: set it for this start only
        previous = threading.stack_size(THREAD_STACK_BYTES)
        try:
            thread.start()
        finally:
            threading.stack_size(previous)
    return thread


class GuestThreads:
    """Guest-stack threads reused between pieces of work (each piece runs on one, start to end).

    Starting a thread waits until the new thread has run (about 0.1 ms on an idle machine,
    milliseconds on a busy one, where it waits for a core and the GIL); handing work to an
    idle thread only wakes it. At most `MAX_IDLE_RUN_THREADS` wait, each for `RUN_THREAD_IDLE_S`,
    and a thread whose work took longer than `RETIRE_AFTER_S` ends, because a thread keeps the
    stack pages its work touched. Work must catch its own exceptions (one that escapes is
    dropped) and leave no thread-local state behind.
    """

    def __init__(self, name: str, *, idle_s: float = RUN_THREAD_IDLE_S, max_idle: int = MAX_IDLE_RUN_THREADS) -> None:
        self._name = name
        self._idle_s = idle_s
        self._max_idle = max_idle
        self._lock = threading.Lock()
        # Idle threads, the last to finish on top: it takes the next piece (its stack pages are the warmest).
        self._idle: list[_Worker] = []

    def submit(self, work: Callable[[], object]) -> None:
        """Runs `work` on an idle thread, or on a new one when none is idle; returns at once."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(work)
            guest_thread(partial(self._serve, worker), name=self._name)
            return
        worker.work = work
        worker.go.release()

    def _serve(self, worker: _Worker) -> None:
        while True:
            work, worker.work = worker.work, None
            started = time.monotonic()
            try:
                if work is not None:
                    work()
            except BaseException:  # the work reports its own outcome; the thread serves the next one
                pass
            del work
            retire = time.monotonic() - started > RETIRE_AFTER_S
            with self._lock:
                if retire or len(self._idle) >= self._max_idle:
                    return
                self._idle.append(worker)
            if not worker.go.acquire(timeout=self._idle_s):
                with self._lock:
                    if worker in self._idle:  # nobody took it meanwhile: the thread ends
                        self._idle.remove(worker)
                        return
                worker.go.acquire()  # taken just as the wait ran out: its work is on the way


class _Worker:
    """One thread of a `GuestThreads`: the work handed to it and the signal that it is there."""

    def __init__(self, work: Callable[[], object]) -> None:
        self.work: Callable[[], object] | None = work
        self.go = threading.Semaphore(0)


#: The threads `on_guest_stack` hands calls to (runs and spares' warm-ups).
_GUEST_THREADS = GuestThreads("wasmexec-guest", idle_s=GUEST_THREAD_IDLE_S, max_idle=MAX_IDLE_THREADS)
