"""A `run_python` run that can outlive the request that started it.

In the 2026-07-28 protocol era a server cannot ask the client anything in the middle
of a request: to get an approval or a model's answer it returns an input-required
result and the client retries the call with the answer. The run then ends (its journal
packed for the retry, which replays it on any replica: `wasmexec._runctx.journal`); this object
is the mailbox between the run and the request driving it. In the 2025 era the same
object serves one request from start to end, with approvals asked by elicitation and
samples by sampling requests while it waits.

`LiveRuns` knows every run whose thread has not ended, paused ones included, so a
drain can wait for them to end by themselves (`idle`) and a shutdown can stop them all
(`stop_all`): a question a run waits on is answered "no" (a paused approval is audited as
denied, and an ``abandoned`` audit line says the client never answered), the run is
cancelled, and the shutdown waits, bounded, for each thread to write its audit line and
give back its directories.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from wasmexec._envelope import Diagnostic, RunResult
from wasmexec._limits import Limits
from wasmexec._runctx.journal import DIVERGED_HINT, Journal, LogTooLarge, pack
from wasmexec._runctx.llm_ask import NO_CLIENT_SAMPLING, Sampler, refusing_sampler
from wasmexec._runctx.toolhost import HostCallError
from wasmexec._sandbox.sandbox import RunControl, Sandbox
from wasmexec._sandbox.spares import Hold, holding
from wasmexec._sandbox.stack import GuestThreads
from wasmexec._server.admission import Ticket, own_slot
from wasmexec._server.sampling import Sample
from wasmexec._server.streaming import OutputStream
from wasmexec._state.sessions import Session, SessionStore, guest_finished
from wasmexec._tools.approval import asking_handle
from wasmexec._tools.pii import PiiVault

#: The threads runs go on: reused, so a call does not wait for a thread to start (`GuestThreads`).
RUN_THREADS = GuestThreads("wasmexec-run")

#: How long a stopping run waits for its approver to take the "no" before it is cancelled: the approver only
#: returns (microseconds), so this bounds a stuck thread, not normal work.
ANSWER_TAKEN_S = 1.0


@dataclass(frozen=True)
class Approval:
    """The run waits for the user to approve a call (the broker's approval request)."""

    request: dict[str, Any]
    snapshot: bytes | None = None
    """2026 era: the run pauses by replay (`wasmexec._runctx.journal`): its packed journal, for the retry to
    replay on any replica. The run ends once the request has taken it."""


@dataclass(frozen=True)
class Asked:
    """2026 era: the run pauses by replay to ask the client's model these questions (its packed journal)."""

    requests: list[dict[str, Any]]
    snapshot: bytes


@dataclass(frozen=True)
class Done:
    """The run ended: its result, or the exception that kept the sandbox from running it."""

    result: RunResult | BaseException


RunEvent = Approval | Asked | Sample | Done
"""What a run hands the request driving it."""


@dataclass(frozen=True)
class Job:
    """What one `run_python` call asked for, checked."""

    code: str
    limits: Limits
    servers: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    new_session: bool = False
    session_id: str | None = None
    end_session: bool = False
    """End the session after this run (its files, PII tokens and slot go)."""
    profile: str = "default"
    """The guest image to run in (one the server offers)."""


@dataclass(frozen=True)
class SessionRun:
    """The session a run works in (reserved for it until the run ends)."""

    store: SessionStore
    session: Session
    workspace: Path
    """The run's private copy of the session's files (its /workspace), on local disk."""
    pii_vault: PiiVault | None = None
    """The session's PII tokens (kept sealed with the session): a token seen in one run works in the next."""
    end: bool = False
    """The session ends with this run (`end_session`)."""


def session_ended(ended: bool) -> Diagnostic:
    """What a result says of the session that `end_session` asked to end."""
    message = (
        "The session has ended: its files and PII tokens are gone."
        if ended
        else "The session was already ended (or expired, or is not this client's): nothing to end, and no code ran."
    )
    return {"severity": "info", "code": "SESSION_ENDED", "message": message,
            "hint": "session: true starts a new one."}  # fmt: skip


class ServerRun:
    """One run on its own thread, exchanging events with the requests that drive it."""

    def __init__(
        self,
        sandbox: Sandbox,
        job: Job,
        *,
        caller: str | None,
        warnings: list[str],
        can_ask: bool,
        can_sample: bool = False,
        ticket: Ticket | None = None,
        session: SessionRun | None = None,
        journal: Journal | None = None,
        pii_vault: PiiVault | None = None,
    ) -> None:
        """`journal`: the run pauses for approvals by replay (2026 era), or is such a replay."""
        self.caller = caller
        self.warnings = warnings
        self.session = session
        self.journal = journal
        self.pii_vault = pii_vault if pii_vault is not None else session.pii_vault if session is not None else None
        self.control = RunControl()
        self.hold = Hold()
        """Keeps back the Store close and the spare the run orders as it ends until its answer is out
        (`wasmexec._sandbox.spares`): the server releases it."""
        if journal is not None:
            journal.on_diverge = lambda reason: self.control.stop()
        self._pausing = False
        self._pause_lock = threading.Lock()
        self._released = threading.Event()
        self.output = OutputStream(sandbox.redactor)
        """Printed output not yet streamed to the client."""
        self._ticket = ticket if ticket is not None else own_slot()
        # SimpleQueue: made per call on the event loop, where a Queue (three Conditions) cost 20-40 µs each.
        self._events: queue.SimpleQueue[RunEvent] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._reporter: Callable[[str], None] | None = None
        self._can_ask = can_ask
        self._can_sample = can_sample
        self._stopping = threading.Event()
        self._asking = threading.Condition()
        self._questions = 0  # approvals being asked now (under `_asking`)
        self._samples: list[Sample] = []
        self._samples_lock = threading.Lock()
        self.abandoned: str | None = None
        """What the run was waiting on from its client when the server stopped it (``approval``, ``sampling``)."""
        self.on_end: Callable[[ServerRun], None] | None = None
        """Told (on the run's thread) once the run has ended and its result is out (`LiveRuns`)."""
        self._wake: Callable[[], object] | None = None
        """Tells the driving request's event loop that an event is waiting (`next_event`); thread-safe."""
        # In the request's context: the run (and its audit lines) acts for the request's principal.
        context = contextvars.copy_context()
        self._started = False
        self._ended = threading.Event()

        def work() -> None:
            try:
                context.run(self._work, sandbox, job)
            finally:
                self._ended.set()  # its audit line written, its directories given back (`join`)

        self._work_in_context = work
        self._timeout_s = job.limits.timeout_ms / 1000

    def start(self) -> None:
        """Starts the run on a thread with a guest-sized stack, so the guest runs on it (no second thread)."""
        self._started = True
        RUN_THREADS.submit(self._work_in_context)

    def _work(self, sandbox: Sandbox, job: Job) -> None:
        approve = self._approve if self.journal is None else self._pause
        approver = approve if self._can_ask else None  # None: such calls are denied with a hint
        sampler: Sampler = self._sample if self.journal is None else self._pause_to_ask  # the journal logs it
        if not self._can_sample:
            sampler = refusing_sampler(*NO_CLIENT_SAMPLING)
        result: RunResult | BaseException
        with self._ticket:  # queued until a run slot is free (`wasmexec._server.admission`)
            workspace = self.session.workspace if self.session is not None else None
            try:
                with holding(self.hold):
                    result = sandbox.run_sync(job.code, job.limits, approver=approver, progress=self._progress,
                                              sampler=sampler, control=self.control, on_output=self.output.feed,
                                              files=job.files, workspace=workspace, pii_vault=self.pii_vault,
                                              journal=self.journal)  # fmt: skip
                if self.journal is not None and self.journal.check_resumed() is not None:
                    result = diverged(result, str(self.journal.diverged))
            except BaseException as exc:  # reported to the request, never lost in a thread
                result = exc
            finally:
                if self.session is not None:
                    result = self._end_session(self.session, workspace, result)
        if self.abandoned is not None and sandbox.audit is not None and not isinstance(result, BaseException):
            # The run line (written by the sandbox) says what ended; this one, that the client never answered.
            sandbox.audit.write("abandoned", run_id=result["run_id"], trace_id=result["trace_id"],
                                waiting_on=self.abandoned, reason="the server stopped first")  # fmt: skip
        self._ticket.record(result)
        self._post(Done(result))
        if self.on_end is not None:
            self.on_end(self)

    def stop(self) -> None:
        """Stops the run for good (the server shuts down): what it waits on is answered no, then it is cancelled.

        The answer comes first, and the cancellation only once the approver has taken it, so a paused
        approval settles as denied (audited so) before the cancellation reaches the call. Idempotent;
        safe before the run starts.
        """
        with self._asking, self._samples_lock:
            if self._questions or self._samples:
                self.abandoned = "approval" if self._questions else "sampling"
        self._stopping.set()
        self._answers.put(False)
        with self._asking:
            self._asking.wait_for(lambda: self._questions == 0, ANSWER_TAKEN_S)
        with self._samples_lock:
            samples = list(self._samples)
        for sample in samples:
            sample.answer(_shut_down())
        self.control.stop()

    def join(self, timeout_s: float) -> bool:
        """Waits until the run's thread has ended (its audit line written); False on timeout."""
        if not self._started:
            return True
        return self._ended.wait(timeout_s)

    @staticmethod
    def _end_session(
        run: SessionRun, workspace: Path | None, result: RunResult | BaseException
    ) -> RunResult | BaseException:
        """Keeps the run's files in the session if the guest finished, else keeps the session as it was."""
        finished = not isinstance(result, BaseException) and guest_finished(result)
        try:
            if run.pii_vault is not None and not run.end:  # saved while the run still holds the session
                run.store.write_extra(run.session, "vault", run.pii_vault.to_bytes())
            warning = run.store.finish(run.session, workspace, keep=finished, end=run.end)
        except OSError as exc:
            run.store.finish(run.session, workspace, keep=False)  # lets go of the session, keeps its files
            warning = f"the files of this run could not be kept in the session: {exc.strerror or exc}"
        if isinstance(result, BaseException):
            return result
        if run.end:
            result["diagnostics"].append(session_ended(True))
            return result
        result["session_id"] = run.session.id
        notes: list[Diagnostic] = []
        if not finished:
            notes.append({"severity": "warning", "code": "SESSION_UNCHANGED", "message":
                          "The run was stopped, so the session keeps the files it had before this run.",
                          "hint": "What this run wrote is only in its artifacts, if it has any; rerun the "
                                  "work within the limits to keep it in the session."})  # fmt: skip
        if warning is not None:
            notes.append({"severity": "warning", "code": "SESSION_UNCHANGED", "message": warning,
                          "hint": "Delete files the session no longer needs."})  # fmt: skip
        result["diagnostics"].extend(notes)
        return result

    def _approve(self, request: dict[str, Any]) -> bool:
        """Called on the broker's thread: hands the question to the driving request, waits for the answer."""
        with self._asking:
            if self._stopping.is_set():  # shutting down: nobody will answer
                return False
            self._questions += 1
        try:
            self._post(Approval(request))
            return self._answers.get(timeout=self.remaining())
        except queue.Empty:
            return False
        finally:
            with self._asking:
                self._questions -= 1
                self._asking.notify_all()

    def _pause(self, request: dict[str, Any]) -> bool:
        """The 2026-era approver (on the approver's thread): pauses the run by replay on this call."""
        handle = asking_handle()
        if handle is not None:
            self._pause_run(handle, lambda snapshot, packed: Approval(request, packed))
        self._released.wait(self.remaining())
        return False

    def _pause_to_ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The 2026-era sampler (under the journal's, which logged `request` as asked): pauses the run by
        replay with every question asked so far; the retry brings the answers."""
        questions = lambda snapshot, packed: Asked([asked[2] for asked in snapshot["asked"]], packed)  # noqa: E731
        self._pause_run(None, questions)
        self._released.wait(self.remaining())
        raise HostCallError("unavailable", "the run paused to ask the client's model", "The client's retry answers.")

    def _pause_run(self, handle: int | None, event: Callable[[dict[str, Any], bytes], Approval | Asked]) -> None:
        """Once the calls in flight have ended (so the journal holds every call that reached a server, and
        every question asked), hands the packed journal to the driving request, which answers the client
        and ends the run; the retry replays it (`wasmexec._runctx.journal`). Only the first pause counts: calls
        and questions asking meanwhile wait with it (the replay asks them again)."""
        journal = self.journal
        assert journal is not None
        with self._pause_lock:
            first, self._pausing = not self._pausing, True
        if not first:
            return
        journal.wait_quiet(self.deadline())
        what = "approval" if handle is not None else "question to the client's model"
        if journal.check_resumed() is not None:  # the run is being stopped
            raise HostCallError("denied", f"the {what} was not asked: the replay diverged", DIVERGED_HINT)
        try:
            snapshot = journal.snapshot(handle)
            if self.pii_vault is not None and self.pii_vault.active:
                snapshot["vault"] = self.pii_vault.export()
            packed = pack(snapshot)
        except (LogTooLarge, ValueError) as exc:
            with self._pause_lock:
                self._pausing = False
            raise HostCallError("denied", f"the {what} could not be asked, so the call was refused: {exc}",
                                "Have calls before it return less (filter, page), or pre-approve the tool "
                                "on the host.") from None  # fmt: skip
        journal.paused_on = handle
        self._post(event(snapshot, packed))

    def end_paused(self) -> None:
        """The request has taken the pause (2026 era): the run ends now, its slot and thread with it."""
        self.control.stop()
        self._released.set()

    async def wait_ended(self, reporter: Callable[[str], None]) -> None:
        """After `end_paused`: waits until the run is over (a sampling question meanwhile is refused)."""
        while not isinstance(event := await self.next_event(reporter), Done):
            if isinstance(event, Sample):
                event.answer(HostCallError("unavailable", "the run paused for an approval"))

    def _sample(self, request: dict[str, Any]) -> dict[str, Any]:
        """The run's sampler (on its own thread): hands the request to the driving request, waits for the answer."""
        event = Sample(request)
        with self._samples_lock:
            self._samples.append(event)
        if self._stopping.is_set():
            event.answer(_shut_down())
        self._post(event)
        try:
            return event.wait(self.deadline())
        finally:
            with self._samples_lock:
                self._samples.remove(event)

    def _progress(self, message: str) -> None:
        reporter = self._reporter
        if reporter is not None:
            try:
                reporter(message)
            except Exception:
                pass

    def _post(self, event: RunEvent) -> None:
        """Hands `event` to the driving request (run thread); wakes its event loop if it waits."""
        self._events.put(event)
        wake = self._wake
        if wake is not None:
            try:
                wake()
            except RuntimeError:  # the request's loop is gone: the event waits in the queue
                pass

    async def next_event(self, reporter: Callable[[str], None]) -> RunEvent:
        """Waits, on the event loop, for the next event: a call to approve, a model to ask, or the end of the run.

        No worker thread is parked on the queue: the run thread schedules the waiter's wake-up on the
        loop without waiting (a thread hop each way saved per run). Cancelling just stops waiting; the
        event stays queued.
        """
        self._reporter = reporter
        token = anyio.lowlevel.current_token()
        try:
            while True:
                try:
                    return self._events.get_nowait()
                except queue.Empty:
                    pass
                arrived = anyio.Event()
                self._wake = partial(token.backend_class.run_sync_soon, arrived.set, (), token.native_token)
                try:
                    if self._events.empty():  # an event posted before `_wake` was set is not missed
                        await arrived.wait()
                finally:
                    self._wake = None
        finally:
            self._reporter = None

    def deadline(self) -> float:
        """The run's deadline (`time.monotonic` seconds): its state's, which counts from when the run
        started, not from when the request arrived (it may have queued for a slot). A run not started
        yet has its whole timeout ahead of it."""
        deadline = self.control.deadline
        return deadline if deadline is not None else time.monotonic() + self._timeout_s

    def remaining(self) -> float:
        """Seconds until the run's deadline (never negative)."""
        return max(0.0, self.deadline() - time.monotonic())

    def answer(self, approved: bool) -> None:
        self._answers.put(approved)


def _shut_down() -> HostCallError:
    """What a question of a run stopped by a shutdown gets instead of the client's answer."""
    return HostCallError("unavailable", "the server is shutting down", "Run the code again when it is back.")


class LiveRuns:
    """Every run whose thread has not ended (running, queued or paused), so a shutdown can stop them. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: set[ServerRun] = set()
        self._closed = False

    def start(self, run: ServerRun) -> None:
        """Starts `run`; once the server is shutting down it is stopped at once (its result: cancelled)."""
        run.on_end = self._ended
        with self._lock:
            self._runs.add(run)
            closed = self._closed
        if closed:
            run.stop()
        run.start()

    def _ended(self, run: ServerRun) -> None:
        with self._lock:
            self._runs.discard(run)

    def idle(self) -> bool:
        """Whether no run is live (a drain is over when this holds)."""
        with self._lock:
            return not self._runs

    def stop_all(self, grace_s: float) -> bool:
        """Stops every run, and every run started later; waits up to `grace_s` for all to end.

        Returns False when some run had not ended by then (the process goes on without it).
        """
        with self._lock:
            self._closed = True
            runs = list(self._runs)
        for run in runs:
            run.stop()
        deadline = time.monotonic() + grace_s
        return all([run.join(max(0.0, deadline - time.monotonic())) for run in runs])


def diverged(result: RunResult, reason: str) -> RunResult:
    """A replay that did not repeat the first run: an error result that says so (no call diverging ran)."""
    result["result"] = {"ok": False, "metrics": result["result"]["metrics"], "error": {
        "type": "ReplayDivergedError", "retryable": False,
        "message": f"the approval could not be finished: {reason}"}}  # fmt: skip
    result["diagnostics"].append({"severity": "error", "code": "REPLAY_DIVERGED", "message": reason,
                                  "hint": DIVERGED_HINT})  # fmt: skip
    return result
