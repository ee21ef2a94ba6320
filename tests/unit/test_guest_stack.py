"""Guest threads: calls run on a kept thread with a guest-sized stack, and nothing of a call stays with it."""

from __future__ import annotations

import threading

import pytest

from wasmexec._sandbox import stack


def _ident() -> int:
    return threading.get_ident()


def test_calls_run_on_a_guest_thread_that_is_kept_for_the_next_call() -> None:
    first = stack.on_guest_stack(_ident)
    assert first != threading.get_ident()
    assert stack.on_guest_stack(_ident) == first


def test_a_call_from_a_guest_thread_runs_inline() -> None:
    outer, inner = stack.on_guest_stack(lambda: (_ident(), stack.on_guest_stack(_ident)))
    assert outer == inner


def test_an_exception_reaches_the_caller_and_the_thread_serves_the_next_call() -> None:
    def fail() -> None:
        raise KeyError("from the guest thread")

    used = stack.on_guest_stack(_ident)
    with pytest.raises(KeyError, match="from the guest thread"):
        stack.on_guest_stack(fail)
    assert stack.on_guest_stack(_ident) == used
    assert stack.on_guest_stack(lambda: 7) == 7  # no outcome of an earlier call is returned


def test_a_long_call_ends_its_thread_instead_of_keeping_its_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "RETIRE_AFTER_S", 0.0)
    ended: list[threading.Thread] = []
    stack.on_guest_stack(lambda: ended.append(threading.current_thread()))
    ended[0].join(10)
    assert not ended[0].is_alive()


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
