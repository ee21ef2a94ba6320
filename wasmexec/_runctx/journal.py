"""The journal of a run's calls: what lets any replica finish a paused 2026-era approval by replaying the run.

In the 2026-07-28 protocol era a run that needs the user's approval returns an input-required
result and ends; the client retries the call with the answer, and whichever replica gets the
retry runs the code again from the start in a fresh sandbox. This journal makes that replay
see what the first run saw:

- While a run executes it records every tool call it made and how each ended, exactly as the
  guest got it (JSON text after PII scrubbing, or the error), and every `llm.ask` answer.
- When the run pauses for an approval, `snapshot` takes that log, the call it paused on, and
  the calls still waiting for an approval of their own ("unsent": they never reached a server).
  When it pauses to ask the client's model (`llm.ask` not in the log), the same, with the
  questions asked in that round ("asked") instead of a paused call: the retry brings their
  answers, which the replay gives those questions as if they were logged.
- A replaying run's journal (`Journal.replaying`) answers each logged call from the log without
  calling the server; the paused call is the one the user's answer applies to (it runs once,
  under `guard`, an idempotency record in the shared store); a call that is neither, before the
  approved one has run, is a *divergence*: the code did not do the same thing twice (it used
  random numbers, the time, or another session state). The run is stopped with a clear error.
  After the approved call, the replay is an ordinary run again, and a later pause snapshots the
  grown log. A replay that pauses again or ends without asking a question it paused on has
  diverged too.

Calls are matched by a key (server, tool, what was asked, and a digest of the arguments as the
guest sent them) and an occurrence number per key (the n-th call with that key). Global order
is not required: calls started together (``asyncio.gather``) may end in any order.

Threads: `start`, `refused`, `sample_started` run on the run's worker thread; the sampler on a
thread per question; `done` on the broker's event loop
(or the worker thread); `asking` on the loop; `wait_quiet` and `snapshot` on the approver's
thread. One lock (a condition) guards everything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from wasmexec._runctx.toolhost import HostCallError

#: A log up to this size (compressed) travels inside the sealed `request_state`; a larger one is kept in
#: the shared store and the state carries its digest (a request header of a few hundred KiB is refused
#: by many proxies; 64 KiB of state stays well within what clients and proxies pass along).
MAX_INLINE_LOG_BYTES = 64 * 1024
#: A run whose calls return more than this before an approval cannot pause by replay (the approval is
#: refused with why): the host keeps the log in memory while the run goes, and a replay reads it back.
MAX_LOG_BYTES = 32 * 1024 * 1024
#: A log inflates to at most this (its JSON: the text above with escapes and keys; sealed by us, so this
#: only bounds the work a corrupt store could cause).
MAX_UNPACKED_BYTES = 8 * MAX_LOG_BYTES

#: What a divergence error says to do.
DIVERGED_HINT = (
    "An approval is finished by running the code again and answering the calls it made before "
    "from a log; code that decides by random numbers, the time or changing data may not repeat "
    "itself. Make the code deterministic up to the approved call, then call run_python again."
)

Outcome = str | HostCallError
Verdict = Literal["live", "replayed", "approved", "diverged"]


class Guard(Protocol):
    """Runs the approved call at most once across replicas (`wasmexec._state.approvals.Claim`)."""

    def before_call(self) -> Outcome | object | None:
        """None: go ahead (the start is recorded first); the recorded outcome, not to be repeated; or
        anything else when it cannot be known whether the call ran (it is then not run)."""

    def after_call(self, outcome: Outcome) -> None:
        """Records what the approved call returned."""


def call_key(server_id: str, tool_name: str, kind: str, arguments: Any) -> str:
    """What identifies a call across replays: names, kind and the arguments as the guest sent them."""
    text = json.dumps([server_id, tool_name, kind, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def sample_key(request: dict[str, Any]) -> str:
    """What identifies an `llm.ask` across replays (its prompt, system text and token budget)."""
    return call_key("codemode", "llm.ask", "sample", request)


def encode_outcome(outcome: Outcome) -> Any:
    if isinstance(outcome, HostCallError):
        return {"e": [outcome.kind, outcome.message, outcome.hint, outcome.detail]}
    return {"t": outcome}


def decode_outcome(data: Any) -> Outcome:
    """Raises ValueError when `data` is not an encoded outcome."""
    if isinstance(data, dict) and isinstance(data.get("t"), str):
        return str(data["t"])
    error = data.get("e") if isinstance(data, dict) else None
    if isinstance(error, list) and len(error) == 4 and all(isinstance(part, str) for part in error[:3]):
        detail = error[3] if isinstance(error[3], dict) else {}
        return HostCallError(error[0], error[1], error[2], **detail)
    raise ValueError("not a logged outcome")


class LogTooLarge(Exception):
    """The run's log is over `MAX_LOG_BYTES`: it cannot be replayed."""


@dataclass
class _Open:
    key: str
    occurrence: int
    label: str
    asking: bool = False


@dataclass
class Journal:
    """One run's calls (see the module). Thread-safe."""

    log: dict[tuple[str, int], Any] = field(default_factory=dict)
    """(key, occurrence) → encoded outcome: what a replay answers from."""
    unsent: set[tuple[str, int]] = field(default_factory=set)
    """Calls that were waiting for an approval of their own when the first run paused (never sent)."""
    samples: dict[tuple[str, int], Any] = field(default_factory=dict)
    """(sample key, occurrence) → the sampler's answer (an error as `encode_outcome` gives it)."""
    awaited: set[tuple[str, int]] = field(default_factory=set)
    """The questions the first run paused on: their answers (from the retry) are in `samples`."""
    replay: bool = False
    """This run replays a paused one."""
    approved: tuple[str, int] | None = None
    """The call the user answered, and `answer` the answer."""
    answer: bool = False
    guard: Guard | None = None
    origin: str = ""
    """The run id of the run that first paused (audit lines of a replay name it)."""
    on_diverge: Callable[[str], None] | None = None
    """Told (once) when the replay diverges; the server stops the run."""
    diverged: str | None = None
    paused_on: int | None = None
    """The call the run paused on (its audit line says "paused")."""
    _done: dict[tuple[str, int], Any] = field(default_factory=dict)
    _sampled: dict[tuple[str, int], Any] = field(default_factory=dict)
    _open: dict[int, _Open] = field(default_factory=dict)
    _starts: dict[str, int] = field(default_factory=dict)
    _sample_starts: dict[str, int] = field(default_factory=dict)
    _bytes: int = 0
    """Text the log holds (outcomes and answers): over `MAX_LOG_BYTES` the run can no longer pause."""
    _asked: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """Questions for the client's model, waiting for the run to pause (their requests)."""
    _samples_open: int = 0
    """Questions started and not yet answered or `_asked` (the quiet wait waits for them)."""
    _busy: bool = False
    """The guest runs (it may start more calls): the quiet wait waits until it blocks in ``wait``."""
    _approved_handle: int | None = None
    _approved_taken: bool = False
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @classmethod
    def replaying(
        cls, payload: dict[str, Any], answer: bool, guard: Guard | None,
        answers: Sequence[Outcome | dict[str, Any]] = (),
    ) -> Journal:  # fmt: skip
        """The journal of a replay, from a `snapshot` payload (already authenticated), the user's `answer` to the
        approval it paused on, or the model's `answers` to the questions it asked (in order). Raises ValueError."""
        pending = payload["pending"]
        journal = cls(approved=(str(pending[0]), int(pending[1])) if pending is not None else None, answer=answer,
                      guard=guard, origin=str(payload.get("origin", "")), replay=True)  # fmt: skip
        for key, occurrence, outcome in payload["log"]:
            decode_outcome(outcome)
            journal.log[(str(key), int(occurrence))] = outcome
        journal.unsent = {(str(key), int(occurrence)) for key, occurrence in payload["unsent"]}
        journal.samples = {(str(key), int(occurrence)): answer for key, occurrence, answer in payload["samples"]}
        asked = payload.get("asked") or []
        if len(asked) != len(answers):
            raise ValueError(f"{len(asked)} questions were asked, {len(answers)} answers expected")
        for (key, occurrence, _request), reply in zip(asked, answers, strict=True):
            slot = (str(key), int(occurrence))
            journal.awaited.add(slot)
            journal.samples[slot] = _encode_answer(reply)
        return journal

    def _resumed(self) -> bool:
        """Whether the replay has passed what the first run paused on (then calls not logged are live)."""
        return (self.approved is None or self._approved_taken) and self.awaited <= self._sampled.keys()

    # -- tool calls (the broker) ------------------------------------------------------------
    def start(self, handle: int, server_id: str, tool_name: str, kind: str, arguments: Any) -> tuple[Verdict, Any]:
        """A call the guest started: ("replayed", outcome) answers it from the log; "approved" is the
        call the user answered; "live" runs it as usual; "diverged" stops the run (`diverged` says why)."""
        key = call_key(server_id, tool_name, kind, arguments)
        label = f"{server_id}.{tool_name}"[:400]
        with self._changed:
            occurrence = self._starts[key] = self._starts.get(key, 0) + 1
            slot = (key, occurrence)
            if slot in self.log:
                self._done[slot] = logged = self.log[slot]
                return "replayed", (decode_outcome(logged), bool(logged.get("s")))
            self._open[handle] = _Open(key, occurrence, label)
            if slot == self.approved and not self._approved_taken:
                self._approved_taken = True
                self._approved_handle = handle
                return "approved", None
            if self._resumed() or slot in self.unsent:
                return "live", None
            reason = (f"the replayed run called {label} where the first run did not (or with other arguments), "
                      "before reaching what it paused on")  # fmt: skip
        self._diverge(reason)
        return "diverged", None

    def is_approved(self, handle: int) -> bool:
        with self._changed:
            return handle == self._approved_handle

    def asking(self, handle: int) -> None:
        """The call waits for the user's approval (it has not reached its server)."""
        with self._changed:
            if handle in self._open:
                self._open[handle].asking = True
            self._changed.notify_all()

    def done(self, handle: int, outcome: Outcome, *, refused: bool = False) -> None:
        """A call ended with what the guest gets, or was `refused` before it started (raised at once)."""
        with self._changed:
            call = self._open.pop(handle, None)
            if call is not None:
                self._done[(call.key, call.occurrence)] = {**encode_outcome(outcome), **({"s": 1} if refused else {})}
                self._bytes += len(outcome) if isinstance(outcome, str) else len(outcome.message) + len(outcome.hint)
            self._changed.notify_all()

    def guest_busy(self, busy: bool) -> None:
        """The guest runs, or blocks waiting for its calls (on the run's thread, from `RunState.wait`)."""
        with self._changed:
            self._busy = busy
            self._changed.notify_all()

    def wait_quiet(self, deadline: float) -> None:
        """Blocks until the guest waits and every open call waits for an approval or the client's model
        (or `deadline`, monotonic): then the log holds every call that reached a server, every question
        started together is asked in the same round, and no call is lost between the pause and the replay."""
        with self._changed:
            while self._busy or self._samples_open > 0 or any(not call.asking for call in self._open.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)

    # -- sampling --------------------------------------------------------------------------
    def sample_started(self) -> None:
        """A question was started (its sampler runs next, on a thread of its own): a pause waits for it."""
        with self._changed:
            self._samples_open += 1

    def sampler(self, inner: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        """`inner` with answers logged, and answered from the log when the replay asks the same again.

        A question not in the log is put among the `asked` ones before `inner` gets it: when `inner`
        pauses the run (2026 era), the snapshot carries it, and every question asked with it."""

        def sample(request: dict[str, Any]) -> Any:
            key = sample_key(request)
            with self._changed:
                occurrence = self._sample_starts[key] = self._sample_starts.get(key, 0) + 1
                slot = (key, occurrence)
                logged = self.samples.get(slot)
                if logged is not None:
                    self._sampled[slot] = logged
                else:
                    self._asked[slot] = request
                self._samples_open -= 1
                self._changed.notify_all()
            if logged is not None:
                return _decode_answer(logged)
            try:
                answer = inner(request)
            except HostCallError as error:
                answer = error
            finally:
                with self._changed:
                    self._asked.pop(slot, None)
            if isinstance(answer, str | dict | HostCallError):
                with self._changed:
                    self._sampled[slot] = _encode_answer(answer)
                    self._bytes += len(str(answer if isinstance(answer, str | HostCallError) else answer.get("text")))
            if isinstance(answer, HostCallError):
                raise answer
            return answer

        return sample

    def check_resumed(self) -> str | None:
        """At a new pause or the end of a replay: why it diverged, if it never asked a question it paused on."""
        with self._changed:
            missed = self.awaited - self._sampled.keys()
        if missed:
            self._diverge("the replayed run did not ask the client's model the question the first run paused on "
                          "(or asked it with other words)")  # fmt: skip
        return self.diverged

    # -- pausing ---------------------------------------------------------------------------
    def snapshot(self, handle: int | None) -> dict[str, Any]:
        """What a replay needs, the run having paused on the call `handle`, or (None) on the questions asked.

        Raises:
            LogTooLarge: the log is over `MAX_LOG_BYTES` compressed.
        """
        with self._changed:
            call = self._open.get(handle) if handle is not None else None
            if call is None and (handle is not None or not self._asked):
                raise ValueError(f"call {handle} is not open" if handle is not None else "no question is asked")
            if self._bytes > MAX_LOG_BYTES:  # checked before building it: the host never holds two copies
                raise LogTooLarge(f"the run's calls returned {self._bytes} bytes before this approval; a run that "
                                  f"is to pause for an approval may take at most {MAX_LOG_BYTES}")  # fmt: skip
            payload = {
                "origin": self.origin,
                "pending": [call.key, call.occurrence] if call is not None else None,
                "label": call.label if call is not None else "llm.ask",
                "asked": [] if call is not None else [[*slot, request] for slot, request in self._asked.items()],
                "log": [[key, occurrence, outcome] for (key, occurrence), outcome in self._done.items()],
                "unsent": [[each.key, each.occurrence] for h, each in self._open.items() if h != handle],
                "samples": [[key, occurrence, answer] for (key, occurrence), answer in self._sampled.items()],
            }
        return payload

    def _diverge(self, reason: str) -> None:
        with self._changed:
            if self.diverged is not None:
                return
            self.diverged = reason
        if self.on_diverge is not None:
            self.on_diverge(reason)


def _encode_answer(answer: Outcome | dict[str, Any]) -> Any:
    """A model's answer as the log keeps it: as the sampler gave it, or an error (which a dict answer never is)."""
    return {"error": encode_outcome(answer)} if isinstance(answer, HostCallError) else answer


def _decode_answer(logged: Any) -> Any:
    if isinstance(logged, dict) and "error" in logged and "text" not in logged:
        error = decode_outcome(logged["error"])
        if isinstance(error, HostCallError):
            raise error
    return logged


def pack(payload: dict[str, Any]) -> bytes:
    """A snapshot as compressed JSON. Raises LogTooLarge."""
    text = json.dumps(payload, separators=(",", ":"), default=str).encode("utf-8", "surrogatepass")
    if len(text) > MAX_UNPACKED_BYTES:
        raise LogTooLarge(f"the run's log of tool calls is {len(text)} bytes (limit {MAX_UNPACKED_BYTES})")
    return zlib.compress(text)


def unpack(data: bytes) -> dict[str, Any]:
    """Raises ValueError for anything but a packed snapshot."""
    inflate = zlib.decompressobj()
    try:
        text = inflate.decompress(data, MAX_UNPACKED_BYTES)
        if inflate.unconsumed_tail:
            raise ValueError(f"a packed log inflates past {MAX_UNPACKED_BYTES} bytes")
        payload = json.loads(text.decode("utf-8", "surrogatepass"))
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a packed log: {exc}") from None
    if not isinstance(payload, dict):
        raise ValueError("not a packed log")
    return payload


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii"))
