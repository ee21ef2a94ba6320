"""The call log: one truthful, final trace entry per call attempt, whichever thread gets there first."""

from __future__ import annotations

import threading

from wasmexec._runctx.calllog import CANCELLED, CallLog


def test_calls_are_traced_in_the_order_they_were_made_whatever_order_they_end_in() -> None:
    log = CallLog()
    log.open(1, "s", "first")
    log.refused(2, "s", "second", "denied: no")
    log.open(3, "s", "third")
    assert log.record(3, ok=True)
    assert log.record(1, ok=False, error="tool-error: boom")
    assert [(e["tool_name"], e["ok"], e.get("error")) for e in log.trace()] == [
        ("first", False, "tool-error: boom"), ("second", False, "denied: no"), ("third", True, None)
    ]  # fmt: skip


def test_closing_records_every_open_call_as_cancelled_and_later_ends_are_ignored() -> None:
    log = CallLog()
    log.open(1, "s", "slow")
    log.open(2, "s", "done")
    assert log.record(2, ok=True)
    log.close()
    assert not log.record(1, ok=True)  # the task finished after the run ended: too late to count as ok
    assert not log.is_open(1)
    assert [(e["ok"], e.get("error")) for e in log.trace()] == [(False, CANCELLED), (True, None)]


def test_a_call_is_ended_once_the_first_end_wins() -> None:
    log = CallLog()
    log.open(1, "s", "t")
    assert log.record(1, ok=False, error=CANCELLED)
    assert not log.record(1, ok=True)
    assert log.trace()[0]["error"] == CANCELLED


def test_a_second_refusal_of_the_same_attempt_keeps_the_first_reason() -> None:
    # The sandbox and the tool host may both refuse one attempt; it is still one attempt.
    log = CallLog()
    log.refused(1, "s", "t", "invalid-argument: not a JSON object")
    log.refused(1, "s", "t", "limit-exceeded: too many calls")
    assert [e["error"] for e in log.trace()] == ["invalid-argument: not a JSON object"]


def test_a_refusal_after_the_run_ended_is_still_traced() -> None:
    log = CallLog()
    log.close()
    log.refused(1, "s", "t", "denied: no")
    assert [e["error"] for e in log.trace()] == ["denied: no"]


def test_long_names_and_errors_are_cut() -> None:
    log = CallLog()
    log.refused(1, "s" * 10_000, "t" * 10_000, "e" * 10_000)
    (entry,) = log.trace()
    assert len(entry["server_id"]) <= 200 and len(entry["tool_name"]) <= 200 and len(entry["error"]) <= 500


def test_concurrent_ends_and_close_leave_exactly_one_entry_per_call() -> None:
    log = CallLog()
    for handle in range(1, 2001):
        log.open(handle, "s", "t")
    start = threading.Barrier(3)

    def finish(handles: range) -> None:
        start.wait()
        for handle in handles:
            log.record(handle, ok=True)

    threads = [threading.Thread(target=finish, args=(range(1, 2001, 2),)),
               threading.Thread(target=finish, args=(range(2, 2001, 2),))]  # fmt: skip
    for thread in threads:
        thread.start()
    start.wait()
    log.close()
    for thread in threads:
        thread.join()
    trace = log.trace()
    assert len(trace) == 2000
    assert all(entry["ok"] or entry["error"] == CANCELLED for entry in trace)
