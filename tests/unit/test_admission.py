from __future__ import annotations

import threading

from wasmexec import validate_run_result
from wasmexec._server.admission import Admission, busy_result


def test_runs_are_admitted_up_to_the_slots_plus_the_queue_then_refused() -> None:
    admission = Admission(max_concurrent_runs=1, max_queued_runs=1)
    first, second = admission.admit(), admission.admit()
    assert first is not None and second is not None
    assert admission.queued == 2 and admission.full() and admission.admit() is None
    with first:
        assert (admission.running, admission.queued) == (1, 1)
    assert (admission.running, admission.queued) == (0, 1) and not admission.full()


def test_a_queued_run_waits_for_a_free_slot() -> None:
    admission = Admission(max_concurrent_runs=1, max_queued_runs=1)
    first, second = admission.admit(), admission.admit()
    assert first is not None and second is not None
    entered = threading.Event()

    def queued() -> None:
        with second:
            entered.set()

    with first:
        waiter = threading.Thread(target=queued)
        waiter.start()
        assert not entered.wait(0.05)  # the slot is taken
    waiter.join(timeout=10)
    assert entered.is_set() and (admission.running, admission.queued) == (0, 0)


def test_the_observer_hears_each_result_and_its_errors_never_escape() -> None:
    seen: list[object] = []
    admission = Admission(observer=seen.append)
    ticket = admission.admit()
    assert ticket is not None
    ticket.record(ValueError("x"))
    assert len(seen) == 1
    admission.observer = lambda result: 1 / 0
    ticket.record(ValueError("y"))


def test_the_busy_answer_is_a_retryable_run_result() -> None:
    answer = busy_result(Admission(1, 0))
    assert answer.is_error
    structured = answer.structured_content
    validate_run_result(structured)
    assert structured is not None and structured["result"]["error"] == {
        "type": "ServerBusy", "message": structured["result"]["error"]["message"], "retryable": True}  # fmt: skip


def test_a_draining_admission_refuses_every_new_run_retryably_and_runs_admitted_before_go_on() -> None:
    admission = Admission(max_concurrent_runs=4, max_queued_runs=4)
    before = admission.admit()
    assert before is not None
    admission.drain()
    assert admission.full() and admission.admit() is None
    with before:
        assert admission.running == 1
    refused = busy_result(admission).structured_content
    assert refused is not None
    validate_run_result(refused)
    error = refused["result"]["error"]
    assert error["type"] == "ServerBusy" and error["retryable"] is True and "draining" in error["message"]


def test_a_draining_admission_still_takes_the_replay_of_a_paused_approval_while_there_is_room() -> None:
    admission = Admission(max_concurrent_runs=1, max_queued_runs=0)
    admission.drain()
    assert admission.admit() is None  # a new run goes to another replica
    replay = admission.admit(continuing=True)  # the end of a run the client started: the drain finishes it
    assert replay is not None
    assert admission.admit(continuing=True) is None  # but never past the slots
    replay.cancel()
