"""Guest threads: calls run on a kept thread with a guest-sized stack, and nothing of a call stays with it.

Calls from the main thread run on it when its stack can grow far enough (`main_thread_fits`): the
cases about guest threads call from another thread; tests/integration/test_main_thread_stack.py
checks the main thread in processes with chosen stack limits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from wasmexec._sandbox import stack

T = TypeVar("T")


def _ident() -> int:
    return threading.get_ident()


def _elsewhere(work: Callable[[], T]) -> T:
    """`work()` called on a plain thread of its own (not the main thread, not a guest thread)."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def call() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:
            failure.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    caller.join(30)
    if failure:
        raise failure[0]
    return outcome[0]


def test_calls_run_on_a_guest_thread_that_is_kept_for_the_next_call() -> None:
    first, caller = _elsewhere(lambda: (stack.on_guest_stack(_ident), _ident()))
    assert first != caller
    assert _elsewhere(lambda: stack.on_guest_stack(_ident)) == first


def test_a_call_from_a_guest_thread_runs_inline() -> None:
    outer, inner = _elsewhere(lambda: stack.on_guest_stack(lambda: (_ident(), stack.on_guest_stack(_ident))))
    assert outer == inner


def test_an_exception_reaches_the_caller_and_the_thread_serves_the_next_call() -> None:
    def fail() -> None:
        raise KeyError("from the guest thread")

    used = _elsewhere(lambda: stack.on_guest_stack(_ident))
    with pytest.raises(KeyError, match="from the guest thread"):
        _elsewhere(lambda: stack.on_guest_stack(fail))
    assert _elsewhere(lambda: stack.on_guest_stack(_ident)) == used
    assert _elsewhere(lambda: stack.on_guest_stack(lambda: 7)) == 7  # no outcome of an earlier call is returned


def test_a_long_call_ends_its_thread_instead_of_keeping_its_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "RETIRE_AFTER_S", 0.0)
    ended: list[threading.Thread] = []
    _elsewhere(lambda: stack.on_guest_stack(lambda: ended.append(threading.current_thread())))
    ended[0].join(10)
    assert not ended[0].is_alive()


def test_the_main_thread_runs_a_call_itself_when_its_stack_fits() -> None:
    assert threading.current_thread() is threading.main_thread()
    here = stack.on_guest_stack(_ident)
    assert (here == _ident()) is stack.main_thread_fits()


def test_idle_guest_threads_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack._GUEST_THREADS, "_max_idle", 1)
    barrier = threading.Barrier(3, timeout=10)
    callers = [threading.Thread(target=stack.on_guest_stack, args=(barrier.wait,)) for _ in range(2)]
    for caller in callers:
        caller.start()
    barrier.wait()  # two guest threads busy at once
    for caller in callers:
        caller.join(10)
    assert len(stack._GUEST_THREADS._idle) <= 1
