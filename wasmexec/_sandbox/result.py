"""The run result, built on the host from what the host saw and the guest's (untrusted) report.

Host-owned fields come only from the host: which limit fired (a limit the guest
claims counts only when the host can vouch for it), whether an error is worth
retrying, the host's diagnostics. Every string is valid Unicode and every number
finite, so the result encodes as strict JSON on the CLI line and in MCP
structuredContent alike. A failure while building it becomes `host_error_result`.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from wasmexec._envelope import (
    MAX_RESULT_DEPTH,
    TOOL_NAME,
    ApprovalState,
    Artifact,
    Diagnostic,
    ErrorInfo,
    Failure,
    LimitName,
    LogEntry,
    Metrics,
    RunResult,
    Success,
    valid_strings,
    valid_text,
)
from wasmexec._limits import Limits
from wasmexec._redact import Redactor
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import MAX_PAYLOAD_BYTES
from wasmexec._sandbox.report import GuestReport
from wasmexec._version import __version__

_BUSY = "Every sandbox slot of this server's pooling allocator is in use; the code did not run."
_BLOCKING_WAIT = (
    "The code made a blocking wait that bypasses the sandbox's clock (a re-imported time.sleep, select, "
    "or a lock or queue with a timeout); such waits could outlive the deadline, so they are refused."
)

_LIMIT_MESSAGES: dict[str, tuple[str, str]] = {
    "timeout": (
        "The run hit its wall-clock limit of {timeout_ms} ms.",
        "Do less work per run, avoid long sleeps, or ask for a higher timeout_ms.",
    ),
    "fuel": (
        "The run used up its fuel budget of {fuel} instructions.",
        "Do less work per run, or ask for a higher fuel budget.",
    ),
    "memory": (
        "The run needs more than its memory limit of {memory_mb} MiB.",
        "Process less data at a time, or ask for a higher memory_mb.",
    ),
    "stack": (
        "The run overflowed the sandbox's call stack.",
        "Recursion went too deep: use a loop or an explicit stack.",
    ),
    "cancelled": ("The run was cancelled.", "Run it again if it is still wanted."),
    "result_bytes": (
        "The result is larger than {max_result_bytes} bytes of JSON.",
        "Return a smaller result: aggregate, filter or truncate before returning.",
    ),
    "result_depth": (
        "The result nests lists and objects deeper than {max_result_depth} levels.",
        "Return a flatter result: MCP clients cannot parse JSON nested much deeper.",
    ),
    "tool_calls": (
        "The run made more tool calls than it may.",
        "Make fewer calls per run (batch, filter, or split the work).",
    ),
    "llm_calls": (
        "The run made more llm.ask calls than its limit of {max_llm_calls}.",
        "Ask fewer, larger questions (batch items into one prompt), or ask for a higher max_llm_calls.",
    ),
    "llm_tokens": (
        "The run's llm.ask answers used up its budget of {max_llm_tokens} tokens.",
        "Ask for shorter answers (lower max_tokens), or ask for a higher max_llm_tokens.",
    ),
    "payload_bytes": (
        "A tool call's arguments or answer were over the {max_payload_bytes} bytes one host call carries.",
        "Send or ask for less data per call (filter, paginate, lower detail).",
    ),
    "workspace_bytes": (
        "The files in /workspace and /tmp passed the workspace limit of {workspace_mb} MiB.",
        "Write less (delete temporary files, compress), or ask for a higher workspace_mb.",
    ),
    "workspace_files": (
        "The files and directories in /workspace and /tmp passed the workspace limit of {workspace_files} entries.",
        "Write fewer files (one archive or one table instead of many), or ask for a higher workspace_files.",
    ),
}

#: Limits the guest trips by itself, inside the sandbox or at a host call's size check
#: (a MemoryError, the bridge's own result size check, an oversized payload): taken from
#: its report, since any code could trip them at will, but told in the host's words.
_GUEST_REACHED = frozenset({"memory", "result_bytes", "payload_bytes"})
_RETRYABLE = frozenset({"timeout", "cancelled"})

_INTERNAL_HINT = "This is a bug in wasmexec, not in the code; report it with the run_id."


def internal_error(exc: BaseException) -> tuple[ErrorInfo, Diagnostic]:
    """The error and diagnostic of a run the host could not finish: the one place they are made.

    Only the exception's type is told: its message may hold anything, unredacted.
    """
    message = f"internal host error ({type(exc).__name__}); the run's outcome is unknown"
    error: ErrorInfo = {"type": "SandboxError", "message": message, "retryable": False}
    diagnostic: Diagnostic = {"severity": "error", "code": "INTERNAL_ERROR", "message": message,
                              "hint": _INTERNAL_HINT, "error_class": "SandboxError"}  # fmt: skip
    return error, diagnostic


def host_error_result(state: RunState, exc: BaseException, image: str = "") -> RunResult:
    """The result of a run whose result could not be built: nothing from the guest, nothing to redact."""
    error, diagnostic = internal_error(exc)
    duration_ms = round((time.monotonic() - state.started) * 1000, 3)
    return failure_result(
        error, diagnostic, run_id=str(state.run_id), trace_id=str(state.trace_id), input_digest=str(state.code_digest),
        image=image, duration_ms=duration_ms, tool_calls=int(state.tool_calls),
        approval_state=_approval_state(state.approvals),
    )  # fmt: skip


def failure_result(
    error: ErrorInfo,
    diagnostic: Diagnostic,
    *,
    run_id: str,
    trace_id: str,
    input_digest: str = "",
    image: str = "",
    duration_ms: float = 0.0,
    tool_calls: int = 0,
    approval_state: ApprovalState = "NOT_REQUIRED",
) -> RunResult:
    """A failed run's result made by the host alone (no guest report, no logs): the one place it is shaped."""
    metrics: Metrics = {"duration_ms": duration_ms, "fuel_used": None, "memory_peak_bytes": None,
                        "tool_calls": tool_calls}  # fmt: skip
    return _host_result({"ok": False, "error": error, "metrics": metrics}, diagnostic, run_id, trace_id,
                        input_digest, image, duration_ms, approval_state)  # fmt: skip


def notice_result(diagnostic: Diagnostic, *, run_id: str, trace_id: str) -> RunResult:
    """The result of a call the host answered without running code (data null), saying why in `diagnostic`."""
    metrics: Metrics = {"duration_ms": 0.0, "fuel_used": None, "memory_peak_bytes": None, "tool_calls": 0}
    return _host_result({"ok": True, "data": None, "metrics": metrics}, diagnostic, run_id, trace_id, "", "", 0.0,
                        "NOT_REQUIRED")  # fmt: skip


def _host_result(
    outcome: Success | Failure, diagnostic: Diagnostic, run_id: str, trace_id: str, input_digest: str, image: str,
    duration_ms: float, approval_state: ApprovalState,
) -> RunResult:  # fmt: skip
    shown: dict[str, Any] = {"data": None, "ok": True} if outcome["ok"] else {"error": outcome["error"], "ok": False}
    return {
        "run_id": run_id,
        "trace_id": trace_id,
        "tool_name": TOOL_NAME,
        "tool_version": __version__,
        "input_digest": input_digest,
        "output_digest": _digest(shown),
        "sandbox_image": image,
        "duration_ms": duration_ms,
        "approval_state": approval_state,
        "result": outcome,
        "logs": [],
        "diagnostics": [diagnostic],
        "tool_trace": [],
        "artifacts": [],
    }


def _digest(output: Any) -> str:
    text = json.dumps(output, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _approval_state(approvals: list[str]) -> ApprovalState:
    if "DENIED" in approvals:
        return "DENIED"
    return "APPROVED" if approvals else "NOT_REQUIRED"


def _host_saw(limit: LimitName, state: RunState) -> bool:
    """Whether the host can vouch for a limit the guest says fired."""
    if limit in _GUEST_REACHED or limit in state.limits_hit:
        return True
    return limit == "tool_calls" and state.tool_calls >= state.limits.max_tool_calls


def _server_unavailable(error_type: str, state: RunState) -> bool:
    """Whether an uncaught ToolCallError came from a server that was unavailable (by the host's own
    trace, not the guest's word): running again later may work."""
    failed = [entry for entry in state.tool_trace if not entry["ok"]]
    last_error = str(failed[-1].get("error", "")) if failed else ""
    return error_type == "ToolCallError" and last_error.startswith("unavailable:")


class ResultBuilder:
    """Collects a run's outcome and diagnostics, then builds the redacted run result."""

    def __init__(self, state: RunState, image: str, limits: Limits) -> None:
        self.state = state
        self.image = image
        self.limits = limits
        self.ok = True
        self.data: Any = None
        self.error: ErrorInfo | None = None
        self.diagnostics: list[Diagnostic] = []
        self.limit: str | None = None
        """The limit (or stop reason) the run failed with, if any."""
        self.artifacts: list[Artifact] = []

    def take_report(self, report: GuestReport) -> None:
        self.diagnostics.extend(report.diagnostics)
        if report.limit is not None:
            self.fail_with_limit(report.limit)
        elif report.ok:
            self.data = report.data
        elif report.claimed_limit is not None and _host_saw(report.claimed_limit, self.state):
            self.fail_with_limit(report.claimed_limit)
        else:
            error = report.error or {"type": "Error", "message": "", "retryable": False}
            self.fail(error["type"], error["message"], _server_unavailable(error["type"], self.state))
            if report.claim is not None:
                self.diagnostics.append(report.claim)

    def fail(self, error_type: str, message: str, retryable: bool = False) -> None:
        self.ok = False
        self.error = {"type": error_type, "message": message, "retryable": retryable}

    def fail_internal(self, exc: BaseException) -> None:
        self.ok = False
        self.error, diagnostic = internal_error(exc)
        self.diagnostics.append(diagnostic)

    def _sandbox_error(self, code: str, message: str, hint: str, retryable: bool = False) -> None:
        self.fail("SandboxError", message, retryable)
        self.diagnostics.append(
            {"severity": "error", "code": code, "message": message, "hint": hint, "error_class": "SandboxError"}
        )

    def fail_with_limit(self, limit: str) -> None:
        """Fails the run with what the host found: a limit, a refused blocking wait, or a trap."""
        self.limit = limit
        if limit == "blocking_wait":
            self._sandbox_error(
                "BLOCKING_WAIT", _BLOCKING_WAIT, "Use time.sleep or asyncio (they wait through the host)."
            )
            return
        if limit == "busy":
            self._sandbox_error("SANDBOX_BUSY", _BUSY, "Retry shortly; the operator can give the server more slots "
                                "(wasmexec serve --pooling).", retryable=True)  # fmt: skip
            return
        if limit.startswith("trap:"):
            self._sandbox_error(
                "SANDBOX_TRAP", f"The sandbox stopped with a WebAssembly trap: {limit.removeprefix('trap:')}",
                "This is a crash of the interpreter, not of your code; simplify the code or report it.",
            )  # fmt: skip
            return
        template, hint = _LIMIT_MESSAGES[limit]
        message = template.format(
            timeout_ms=self.limits.timeout_ms,
            fuel=self.limits.fuel,
            memory_mb=self.limits.memory_mb,
            max_result_bytes=self.limits.max_result_bytes,
            max_result_depth=MAX_RESULT_DEPTH,
            max_payload_bytes=MAX_PAYLOAD_BYTES,
            workspace_mb=self.limits.workspace_mb,
            workspace_files=self.limits.workspace_files,
            max_llm_calls=self.limits.max_llm_calls,
            max_llm_tokens=self.limits.max_llm_tokens,
        )
        self.fail("SandboxLimitError", message, retryable=limit in _RETRYABLE)
        limit_name: LimitName = limit  # type: ignore[assignment]
        self.diagnostics.append(
            {
                "severity": "error",
                "code": "SANDBOX_LIMIT",
                "message": message,
                "hint": hint,
                "error_class": "SandboxLimitError",
                "limit": limit_name,
            }
        )

    def add_host_warnings(self, warnings: list[str], logs_truncated: bool) -> None:
        """The host's own warnings: servers that were unavailable, output that was cut."""
        for warning in dict.fromkeys(warnings):
            self.diagnostics.append(
                {
                    "severity": "warning",
                    "code": "TOOLS_UNAVAILABLE",
                    "message": valid_text(warning),
                    "hint": "The code ran with what was reachable; retry later for the rest.",
                }
            )
        if logs_truncated:
            self.diagnostics.append(
                {
                    "severity": "warning",
                    "code": "LOGS_TRUNCATED",
                    "message": "Output over the log limits was dropped.",
                    "hint": "Print less, or summarize before printing.",
                }
            )

    def add_symlink_warning(self, symlinks: int) -> None:
        """Says that symlinks in the workspace were left out of the artifacts."""
        if symlinks:
            self.diagnostics.append(
                {
                    "severity": "warning",
                    "code": "SYMLINKS_SKIPPED",
                    "message": f"{symlinks} symlink(s) in /workspace are not artifacts (symlinks are never followed).",
                    "hint": "Write regular files (shutil.copy) for anything that should be returned.",
                }
            )

    def finish(self, logs: list[LogEntry], fuel_used: int | None, redactor: Redactor) -> tuple[RunResult, int]:
        duration_ms = round((time.monotonic() - self.state.started) * 1000, 3)
        metrics: Metrics = {
            "duration_ms": duration_ms,
            "fuel_used": fuel_used,
            "memory_peak_bytes": None,
            "tool_calls": self.state.tool_calls,
        }
        outcome: dict[str, Any] = (
            {"ok": True, "data": self.data, "metrics": metrics}
            if self.ok
            else {"ok": False, "error": self.error, "metrics": metrics}
        )
        # Tool errors come from MCP servers: as untrusted as the guest's words.
        tool_trace = valid_strings(self.state.tool_trace)
        redacted: dict[str, Any]
        redacted, found = redactor.redact(
            {"result": outcome, "logs": logs, "diagnostics": self.diagnostics, "tool_trace": tool_trace}
        )
        output = {key: value for key, value in redacted["result"].items() if key != "metrics"}
        result: RunResult = {
            "run_id": self.state.run_id,
            "trace_id": self.state.trace_id,
            "tool_name": TOOL_NAME,
            "tool_version": __version__,
            "input_digest": self.state.code_digest,
            "output_digest": _digest(output),  # strict: raises on anything that slipped through
            "sandbox_image": self.image,
            "duration_ms": duration_ms,
            "approval_state": _approval_state(self.state.approvals),
            "result": redacted["result"],
            "logs": redacted["logs"],
            "diagnostics": redacted["diagnostics"],
            "tool_trace": redacted["tool_trace"],
            "artifacts": self.artifacts,
        }
        return result, found
