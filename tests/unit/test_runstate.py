"""The run state: per-run caps on what the guest makes the host hold, waits, stops, the current run."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from wasmexec._limits import Limits
from wasmexec._runctx.runstate import (
    DECODED_JSON_FACTOR,
    MAX_OUTSTANDING_CALLS,
    WAIT_HANDLE_MARGIN,
    RunState,
    bound,
    check_deadline,
    current,
)
from wasmexec._runctx.toolhost import HostCallError, NoTools


def _state(**limits: int) -> RunState:
    return RunState(limits=Limits(**limits), tools=NoTools(), run_id="r")


def _started(state: RunState, argument_bytes: int = 10) -> int:
    handle = state.next_handle()
    state.reserve(handle, argument_bytes)
    return handle


def test_a_run_may_have_at_most_the_cap_of_calls_outstanding() -> None:
    state = _state()
    handles = [_started(state) for _ in range(MAX_OUTSTANDING_CALLS)]
    with pytest.raises(HostCallError) as caught:
        _started(state)
    assert caught.value.kind == "limit-exceeded" and "await" in caught.value.hint.lower()
    state.complete(handles[0], '"done"')
    assert state.outstanding() == MAX_OUTSTANDING_CALLS  # completed but not collected still counts
    assert state.wait([handles[0]], 0) == [(handles[0], '"done"')]
    _started(state)  # collecting freed a slot


def test_a_call_that_could_not_start_frees_its_slot_and_its_charge() -> None:
    state = _state()
    handle = _started(state, 1_000)
    assert state.held_bytes() == 1_000 * DECODED_JSON_FACTOR
    state.release(handle)
    assert state.outstanding() == 0 and state.held_bytes() == 0


def test_arguments_are_charged_against_the_memory_limit_while_in_flight() -> None:
    state = _state(memory_mb=1)
    too_big = 1024 * 1024 // DECODED_JSON_FACTOR + 1
    with pytest.raises(HostCallError) as caught:
        _started(state, too_big)
    assert caught.value.kind == "limit-exceeded" and "memory limit of 1 MiB" in caught.value.message
    handle = _started(state, too_big - 10)
    state.complete(handle, '"small"')
    assert state.held_bytes() < 100  # the arguments' charge is replaced by the outcome's size


def test_an_outcome_that_would_pass_the_memory_limit_is_dropped_for_an_error() -> None:
    state = _state(memory_mb=1)
    handles = [_started(state, 1) for _ in range(2)]
    state.complete(handles[0], "x" * 700_000)
    state.complete(handles[1], "y" * 700_000)
    first, second = dict(state.wait(handles, 0)).values()
    assert first == "x" * 700_000
    assert isinstance(second, HostCallError) and second.kind == "limit-exceeded"
    assert "as_completed" in second.hint
    assert state.held_bytes() == 0


def test_waiting_on_unknown_or_repeated_handles_answers_each_once_at_once() -> None:
    state = _state()
    ready = state.wait([7, 8, 7, 7], 60)
    assert [handle for handle, _ in ready] == [7, 8]
    assert all(isinstance(outcome, HostCallError) and outcome.kind == "not-found" for _, outcome in ready)


def test_a_handle_list_longer_than_the_outstanding_calls_and_a_margin_is_refused() -> None:
    state = _state()
    _started(state)
    with pytest.raises(HostCallError) as caught:
        state.wait(list(range(1, WAIT_HANDLE_MARGIN + 3)), 0)
    assert caught.value.kind == "limit-exceeded" and f"{WAIT_HANDLE_MARGIN + 2} handles" in caught.value.message


def test_a_completion_from_another_thread_wakes_the_waiting_guest() -> None:
    state = _state()
    handle = _started(state)
    threading.Timer(0.05, state.complete, (handle, '"late"')).start()
    started = time.monotonic()
    assert state.wait([handle], 30) == [(handle, '"late"')]
    assert time.monotonic() - started < 10


def test_a_stop_from_another_thread_wakes_the_waiting_guest_with_nothing() -> None:
    state = _state()
    handle = _started(state)
    threading.Timer(0.05, state.stop, ("cancelled",)).start()
    assert state.wait([handle], 30) == []
    assert state.stop_reason == "cancelled"


def test_the_first_stop_reason_wins() -> None:
    state = _state()
    state.stop("blocking_wait")
    state.stop("cancelled")
    assert state.should_stop() == "blocking_wait"


def test_the_deadline_is_a_timeout_stop() -> None:
    state = _state(timeout_ms=1)
    state.started -= 1
    assert state.should_stop() == "timeout"
    assert state.wait([], 60) == []


def test_an_interrupt_is_kept_for_the_owner_and_stops_the_run() -> None:
    state = _state()
    first, second = KeyboardInterrupt(), KeyboardInterrupt()
    state.interrupted(first)
    state.interrupted(second)
    assert state.interruption is first and state.stop_reason == "cancelled"


def test_a_finished_call_is_forgotten_and_unfinished_ones_are_cancelled_at_the_end() -> None:
    state = _state()
    done: Future[str] = Future()
    running: Future[str] = Future()
    state.track(done)
    state.track(running)
    done.set_result("x" * 1000)
    assert done not in state._in_flight  # a done future would keep its result alive
    state.finish()
    assert running.cancelled()


def test_the_current_run_is_per_thread_and_restored_after_binding() -> None:
    outer, inner = _state(), _state()
    seen: list[RunState | None] = []
    with bound(outer):
        with bound(inner):
            assert current() is inner
        assert current() is outer
        thread = threading.Thread(target=lambda: seen.append(current()))
        thread.start()
        thread.join()
    assert current() is None and seen == [None]


def test_host_work_stops_at_the_current_runs_deadline() -> None:
    check_deadline("unbound work")  # no current run: nothing to stop
    state = _state(timeout_ms=1)
    state.started -= 1
    with bound(state), pytest.raises(HostCallError) as caught:
        check_deadline("search_tools")
    assert caught.value.kind == "limit-exceeded" and caught.value.detail == {"limit": "timeout"}
    assert caught.value.message.startswith("search_tools was stopped at the run's deadline")
