"""Reused guest-stack threads (`wasmexec._sandbox.stack.GuestThreads`): the server's runs go to them."""

from __future__ import annotations

import threading
import time
from typing import Any

from wasmexec._sandbox.stack import RETIRE_AFTER_S, GuestThreads, on_guest_stack


def _until(condition: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _alive(name: str) -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == name)


def _run(pool: GuestThreads, work: Any) -> Any:
    done = threading.Event()
    out: list[Any] = []

    def body() -> None:
        try:
            out.append(work())
        finally:
            done.set()

    pool.submit(body)
    assert done.wait(10)
    return out[0]


def test_work_runs_on_a_guest_stack_thread_and_the_guest_needs_no_second_thread() -> None:
    pool = GuestThreads("test-guest-stack")
    here, inner = _run(pool, lambda: (threading.current_thread(), on_guest_stack(threading.current_thread)))
    assert here is inner and here.name == "test-guest-stack"


def test_an_idle_thread_takes_the_next_work_and_ends_after_its_idle_time() -> None:
    pool = GuestThreads("test-guest-reuse", idle_s=5)
    first = _run(pool, threading.get_ident)
    _until(lambda: len(pool._idle) == 1)  # the thread has gone back to wait
    assert _run(pool, threading.get_ident) == first
    short = GuestThreads("test-guest-idle", idle_s=0.05)
    _run(short, threading.get_ident)
    _until(lambda: _alive("test-guest-idle") == 0)


def test_at_most_max_idle_threads_wait_after_a_burst_and_failing_work_does_not_kill_them() -> None:
    pool = GuestThreads("test-guest-burst", idle_s=5, max_idle=2)
    release = threading.Event()
    started = threading.Semaphore(0)

    def blocked() -> None:
        started.release()
        release.wait(10)
        raise RuntimeError("work that fails is the work's business")

    def quick() -> None:
        started.release()
        raise RuntimeError("work that fails is the work's business")

    for _ in range(5):
        pool.submit(blocked)
    for _ in range(5):
        assert started.acquire(timeout=10)
    assert _alive("test-guest-burst") == 5
    release.set()
    _until(lambda: _alive("test-guest-burst") == 0)  # work that long may have left a deep stack: threads end
    for _ in range(5):
        pool.submit(quick)
    for _ in range(5):
        assert started.acquire(timeout=10)
    _until(lambda: _alive("test-guest-burst") <= 2)
    _until(lambda: len(pool._idle) == _alive("test-guest-burst"))
    assert _run(pool, lambda: 7) == 7 and _alive("test-guest-burst") <= 2


def test_a_thread_whose_work_took_long_ends_instead_of_keeping_its_stack() -> None:
    pool = GuestThreads("test-guest-retire", idle_s=5)
    _run(pool, lambda: time.sleep(RETIRE_AFTER_S * 2))
    _until(lambda: _alive("test-guest-retire") == 0)
