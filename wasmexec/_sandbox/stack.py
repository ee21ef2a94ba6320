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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

#: The engines' ``max_wasm_stack``: deep enough for structures nested 100,000 deep (measured).
WASM_STACK_BYTES = 64 << 20
#: A guest thread's native stack: the wasm stack plus room for the host frames under and over it.
THREAD_STACK_BYTES = WASM_STACK_BYTES + (16 << 20)

T = TypeVar("T")

_local = threading.local()
_stack_size_lock = threading.Lock()


def on_guest_stack(work: Callable[[], T]) -> T:
    """Returns ``work()``, run on a thread whose stack holds `WASM_STACK_BYTES` of wasm.

    On such a thread already: runs it here. Otherwise on a new one (about 0.1 ms), which the
    caller waits for; an exception of `work` is re-raised here.
    """
    if getattr(_local, "deep", False):
        return work()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        _local.deep = True
        try:
            outcome.append(work())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=body, name="wasmexec-guest", daemon=True)
    with _stack_size_lock:  # the size is process-wide: set it for this start only
        previous = threading.stack_size(THREAD_STACK_BYTES)
        try:
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
