"""Sampling from code: `codemode.llm.ask` asks the model of whoever started the run.

The guest's ``start-sample`` host function (``wasm_assets/wit/world.wit``) lands in
`Sampling.start`, after `wasmexec._sandbox.hostcalls` has bounded its arguments. The
call gets a handle like a tool call, so ``await llm.ask(...)`` composes with
``asyncio.gather`` and the run's deadline through the same ``wait``.

Who answers: the run's *sampler*, a blocking callable like the approver. `wasmexec
serve` passes one that asks the MCP client that sent ``run_python`` (sampling, both
protocol eras: `wasmexec._server.sampling`); a library user passes ``sampler=`` to
`Sandbox.run`; the CLI has none. Without one the call fails with ``unavailable``
(``detail.what == "sampling"``), which the guest raises as ``SamplingUnavailableError``.

A sampler gets ``{"prompt": str, "system": str | None, "max_tokens": int}`` (the prompt
and system text with the run's secrets redacted: they leave the host) and returns the
answer's text, or ``{"text": str, "tokens": int?, "model": str?}``. It runs on a thread
of its own; an exception it raises fails that one call.

Caps (`Limits.max_llm_calls`, `Limits.max_llm_tokens`): every attempt counts as a call;
tokens are those of the answers. No tokenizer runs on the host, and MCP's
``CreateMessageResult`` reports no usage, so an answer counts the ``tokens`` its
sampler reports, else an estimate of one token per `BYTES_PER_TOKEN` bytes of UTF-8
(about right for English and code; it overcounts short words and undercounts nothing
by much). A call asks the model for at most what is left of the budget, less what calls
still running may use: ``max_tokens`` sent = min(asked, left).

Everything the sampler returns is untrusted: only text is accepted, as valid Unicode,
at most `MAX_ANSWER_BYTES_PER_TOKEN` bytes per token asked for (and at least
`MIN_ANSWER_BYTES`).

Each call leaves one ``tool_trace`` entry (``server_id`` `TRACE_SERVER_ID`, ``tool_name``
`TRACE_TOOL_NAME`) and one audit line of kind ``"sampling"`` with digests and sizes only.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wasmexec._audit import digest, principal_field
from wasmexec._runctx.toolhost import HostCallError, internal_error

if TYPE_CHECKING:
    from wasmexec._audit import AuditLog
    from wasmexec._envelope import ToolTraceEntry
    from wasmexec._limits import Limits
    from wasmexec._redact import Redactor
    from wasmexec._runctx.calllog import CallLog
    from wasmexec._runctx.journal import Journal

#: How a sampling call appears in the ``tool_trace``.
TRACE_SERVER_ID = "codemode"
TRACE_TOOL_NAME = "llm.ask"
#: A prompt is text for a model's context window: 256 KiB is about 64k tokens, more than most take.
MAX_PROMPT_BYTES = 256 * 1024
#: A system prompt is instructions, not data.
MAX_SYSTEM_BYTES = 16 * 1024
#: The most one call may ask for: the longest answers models give.
MAX_ASK_TOKENS = 32_768
#: The estimate of an answer's tokens when nobody counted them: about right for English and code.
BYTES_PER_TOKEN = 4
#: No real token is longer than this in UTF-8; an answer longer than this per token asked for is refused.
MAX_ANSWER_BYTES_PER_TOKEN = 16
#: Room for a short answer to a small `max_tokens` in any script.
MIN_ANSWER_BYTES = 4096
#: Longest model name kept (it comes from the client).
MAX_MODEL_CHARS = 200

#: What a sampler is: blocking, given the request, returns the text or {"text", "tokens"?, "model"?}.
Sampler = Callable[[dict[str, Any]], Any]

NO_MODEL = (
    "there is no model to ask: this run has no sampler",
    "The CLI has no model: run through `wasmexec serve` with an MCP client that supports sampling "
    "(or pass sampler= to Sandbox.run).",
)
NO_CLIENT_SAMPLING = (
    "this client does not support sampling",
    "Use an MCP client that declares the sampling capability, or do this step without a model.",
)


def unavailable(message: str, hint: str) -> HostCallError:
    """The error a guest raises as ``SamplingUnavailableError``."""
    return HostCallError("unavailable", message, hint, what="sampling")


def refusing_sampler(message: str, hint: str) -> Sampler:
    """A sampler for a run that cannot sample (e.g. its client lacks the capability): says why."""

    def refuse(request: dict[str, Any]) -> Any:
        raise unavailable(message, hint)

    return refuse


def estimate_tokens(text: str) -> int:
    """Tokens of `text` when nobody counted them: one per `BYTES_PER_TOKEN` bytes of UTF-8, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


@dataclass(frozen=True)
class Answer:
    """A checked answer: its text, tokens charged, whether they were estimated, the model's name."""

    text: str
    tokens: int
    estimated: bool
    model: str


def check_answer(value: Any, max_tokens: int) -> Answer:
    """Checks what a sampler returned (untrusted); raises HostCallError when it is not an answer."""
    reported: Any = None
    model: Any = ""
    if isinstance(value, dict):
        text, reported, model = value.get("text"), value.get("tokens"), value.get("model") or ""
    else:
        text = value
    if not isinstance(text, str):
        raise HostCallError("tool-error", f"the model's answer is not text ({type(text).__name__})",
                            "llm.ask accepts only text answers; ask the model for text.")  # fmt: skip
    limit = max(MIN_ANSWER_BYTES, max_tokens * MAX_ANSWER_BYTES_PER_TOKEN)
    if len(text) > limit:  # characters ≤ bytes: refused before encoding a huge text
        raise _too_long(len(text), limit)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise HostCallError("tool-error", "the model's answer is not valid Unicode (it has lone surrogates)",
                            "Ask again; the client sent a broken answer.") from None  # fmt: skip
    if size > limit:
        raise _too_long(size, limit)
    estimated = not (isinstance(reported, int) and not isinstance(reported, bool) and 0 <= reported <= 2**31)
    tokens = estimate_tokens(text) if estimated else int(reported)
    return Answer(text, tokens, estimated, str(model)[:MAX_MODEL_CHARS] if isinstance(model, str) else "")


def _too_long(size: int, limit: int) -> HostCallError:
    return HostCallError("tool-error", f"the model's answer is {size} bytes, more than the {limit} bytes its "
                         "max_tokens allows", "Ask for a shorter answer (lower max_tokens).")  # fmt: skip


class AskingRun(Protocol):
    """What sampling reads and calls of its run (`wasmexec._runctx.runstate.RunState` is one).

    A protocol, not the run state itself: the state holds a `Sampling`, so this module cannot
    import it (the package's modules import one way).
    """

    @property
    def limits(self) -> Limits: ...
    @property
    def calls(self) -> CallLog: ...
    @property
    def journal(self) -> Journal | None: ...
    @property
    def run_id(self) -> str: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def code_digest(self) -> str: ...
    @property
    def principal(self) -> str | None: ...
    def next_handle(self) -> int: ...
    def reserve(self, handle: int, argument_bytes: int) -> None: ...
    def complete(self, handle: int, outcome: str | HostCallError) -> None: ...


@dataclass
class Sampling:
    """One run's sampling: its sampler, caps, redaction and audit. Thread-safe (its own lock)."""

    sampler: Sampler | None = None
    redactor: Redactor | None = None
    audit: AuditLog | None = None
    calls: int = 0
    """Attempts within the cap (each counts, whatever its outcome)."""
    calls_over_cap: int = 0
    tokens_used: int = 0
    """Tokens of the answers received."""
    _reserved: dict[int, int] = field(default_factory=dict)
    """Handle → max_tokens sent, for calls still running."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- admission (on the run's thread, before any work) ---------------------------------------
    def admit(self, run: AskingRun, prompt: str, system: str, max_tokens: int, dropped: dict[int, int]) -> int:
        """Counts the call and checks sizes, caps and the sampler; returns its handle with the tokens reserved.

        Raises:
            HostCallError: the refusal (already traced and audited).
        """
        if self.calls >= run.limits.max_llm_calls:
            self.calls_over_cap += 1
            over = HostCallError(
                "limit-exceeded", f"this run may make at most {run.limits.max_llm_calls} llm.ask calls",
                "Ask fewer, larger questions (batch items into one prompt), or ask for a higher max_llm_calls.",
                limit="llm_calls",
            )  # fmt: skip
            if self.calls_over_cap == 1:  # traced once: a loop past the cap must not grow the trace
                self._refused(run, run.next_handle(), prompt, system, over)
            raise over
        self.calls += 1
        handle = run.next_handle()
        try:
            sent = self._check(run, prompt, system, max_tokens, dropped)
            run.reserve(handle, len(prompt) + len(system))
        except HostCallError as refused:
            self._refused(run, handle, prompt, system, refused)
            raise
        with self._lock:
            self._reserved[handle] = sent
        return handle

    def _check(self, run: AskingRun, prompt: str, system: str, max_tokens: int, dropped: dict[int, int]) -> int:
        """The max_tokens to send, or the reason to refuse."""
        for index, what, limit in ((0, "the prompt", MAX_PROMPT_BYTES), (1, "the system prompt", MAX_SYSTEM_BYTES)):
            if index in dropped:
                raise HostCallError("limit-exceeded", f"{what} is {dropped[index]} bytes; the limit is {limit}",
                                    "Send less text per llm.ask call.", limit="payload_bytes")  # fmt: skip
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_ASK_TOKENS:
            raise HostCallError("invalid-argument", f"max_tokens must be between 1 and {MAX_ASK_TOKENS}, "
                                f"got {max_tokens!r}", "Pass a smaller max_tokens.")  # fmt: skip
        if self.sampler is None:
            raise unavailable(*NO_MODEL)
        with self._lock:
            left = run.limits.max_llm_tokens - self.tokens_used - sum(self._reserved.values())
        if left <= 0:
            raise HostCallError(
                "limit-exceeded", f"this run's answers may have at most {run.limits.max_llm_tokens} tokens, "
                "and they are used up (or reserved by calls still running)",
                "Ask for shorter answers (lower max_tokens), or ask for a higher max_llm_tokens.", limit="llm_tokens",
            )  # fmt: skip
        return min(max_tokens, left)

    # -- the call (on a thread of its own) -----------------------------------------------------
    def start(self, run: AskingRun, handle: int, prompt: str, system: str) -> None:
        """Asks the sampler on a thread of its own; the outcome reaches the guest through `run.complete`."""
        run.calls.open(handle, TRACE_SERVER_ID, TRACE_TOOL_NAME)
        if run.journal is not None:  # before the thread: a pause by replay waits for this question too
            run.journal.sample_started()
        thread = threading.Thread(target=self._ask, args=(run, handle, prompt, system), daemon=True,
                                  name="wasmexec-sample")  # fmt: skip
        thread.start()

    def _ask(self, run: AskingRun, handle: int, prompt: str, system: str) -> None:
        with self._lock:
            sent = self._reserved.get(handle, 0)
        started = time.monotonic()
        redactions = 0
        if self.redactor is not None:  # the prompt leaves the host: no secret goes with it
            prompt, redacted = self.redactor.redact_text(prompt)
            system, in_system = self.redactor.redact_text(system) if system else (system, 0)
            redactions = redacted + in_system
        request = {"prompt": prompt, "system": system or None, "max_tokens": sent}
        answer: Answer | None = None
        error: HostCallError | None = None
        try:
            answer = check_answer(self._call_sampler(request), sent)
        except HostCallError as failed:
            error = failed
        except Exception as exc:
            error = internal_error(exc)
        with self._lock:
            self._reserved.pop(handle, None)
            if answer is not None:
                self.tokens_used += answer.tokens
        if answer is not None:
            run.complete(handle, json.dumps({"text": answer.text, "model": answer.model, "tokens": answer.tokens}))
            run.calls.record(handle, ok=True)
        else:
            assert error is not None
            run.complete(handle, error)
            run.calls.record(handle, ok=False, error=f"{error.kind}: {error.message}")
        self._audit(run, request, error, answer, duration_s=time.monotonic() - started, redactions=redactions)

    def _call_sampler(self, request: dict[str, Any]) -> Any:
        sampler = self.sampler
        if sampler is None:
            raise unavailable(*NO_MODEL)
        try:
            return sampler(request)
        except HostCallError:
            raise
        except Exception as exc:  # a sampler that fails has not answered
            message = f"the model call failed: {type(exc).__name__}: {exc}"[:500]
            raise HostCallError("tool-error", message, "Try again later, or do this step without a model.",
                                retryable=True) from None  # fmt: skip

    # -- records -------------------------------------------------------------------------------
    def _refused(self, run: AskingRun, handle: int, prompt: str, system: str, error: HostCallError) -> None:
        run.calls.refused(handle, TRACE_SERVER_ID, TRACE_TOOL_NAME, f"{error.kind}: {error.message}")
        self._audit(run, {"prompt": prompt, "system": system or None, "max_tokens": 0}, error, None, duration_s=0.0,
                    redactions=0)  # fmt: skip

    def _audit(
        self, run: AskingRun, request: dict[str, Any], error: HostCallError | None, answer: Answer | None,
        *, duration_s: float, redactions: int,
    ) -> None:  # fmt: skip
        if self.audit is None:
            return
        prompt, system = request["prompt"], request["system"] or ""
        fields: dict[str, Any] = {
            "run_id": run.run_id, "trace_id": run.trace_id, "code_digest": run.code_digest,
            "prompt_digest": digest(prompt), "prompt_bytes": len(prompt.encode("utf-8", "surrogatepass")),
            "system_digest": digest(system) if system else None,
            "system_bytes": len(system.encode("utf-8", "surrogatepass")), "max_tokens": request["max_tokens"],
            "duration_ms": round(duration_s * 1000, 3), "outcome": outcome_of(error), "redactions": redactions,
            **principal_field(run.principal),
        }  # fmt: skip
        if answer is not None:
            fields.update(response_digest=digest(answer.text), response_bytes=len(answer.text.encode("utf-8")),
                          tokens=answer.tokens, tokens_estimated=answer.estimated, model=answer.model)  # fmt: skip
        try:
            self.audit.write("sampling", **fields)
        except OSError:
            pass  # the audit trail must not cost the run its answer; the run line still records the run


def outcome_of(error: HostCallError | None) -> str:
    """A sampling call's outcome word (audit and metrics): ok, over_cap, unavailable or error."""
    if error is None:
        return "ok"
    if error.kind == "limit-exceeded" and error.detail.get("limit") in ("llm_calls", "llm_tokens"):
        return "over_cap"
    if error.kind == "unavailable" and error.detail.get("what") == "sampling":
        return "unavailable"
    return "error"


def trace_outcome(entry: ToolTraceEntry) -> str | None:
    """The outcome word of a ``tool_trace`` entry that is a sampling call, else None (for metrics)."""
    if entry.get("server_id") != TRACE_SERVER_ID or entry.get("tool_name") != TRACE_TOOL_NAME:
        return None
    error = entry.get("error")
    if error is None:
        return "ok"
    if error.startswith(("limit-exceeded: this run may make at most", "limit-exceeded: this run's answers")):
        return "over_cap"
    return "unavailable" if error.startswith("unavailable: ") else "error"
