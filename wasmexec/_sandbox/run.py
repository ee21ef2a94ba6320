"""One run: a fresh Store and instance, limits, the guest call, and the run result."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from wasmtime import Store, Trap, WasiConfig, WasmtimeError

from wasmexec._envelope import TOOL_NAME, ApprovalState, Diagnostic, ErrorInfo, LimitName, Metrics, RunResult
from wasmexec._limits import Limits
from wasmexec._redact import Redactor
from wasmexec._runstate import RunState
from wasmexec._sandbox import epoch as _epoch
from wasmexec._sandbox import hostcalls as _hostcalls
from wasmexec._sandbox.output import OutputCapture
from wasmexec._sandbox.report import GuestReport, parse_report
from wasmexec._sandbox.runtime import Runtime
from wasmexec._toolhost import ToolHost
from wasmexec._version import __version__

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
}


def execute(
    runtime: Runtime, code: str, limits: Limits, tools: ToolHost, redactor: Redactor, state: RunState | None = None
) -> tuple[RunResult, int]:
    """Runs `code` once in a fresh sandbox; returns the run result and how many secrets were redacted."""
    state = state or RunState(limits=limits, tools=tools, run_id=uuid.uuid4().hex)
    state.code_digest = "sha256:" + hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
    prepared = runtime.prepare(limits.fuel is not None)
    state.started = time.monotonic()  # the clock starts now, not while the component was loading
    output = OutputCapture(limits.max_stdout_bytes, limits.max_stderr_bytes, state.started)
    store = Store(prepared.engine)
    wasi = WasiConfig()  # empty: no files, env, args, network; stdin reads as empty
    wasi.stdout_custom = output.stdout.write
    wasi.stderr_custom = output.stderr.write
    store.set_wasi(wasi)
    store.set_limits(memory_size=limits.memory_bytes)
    if limits.fuel is not None:
        store.set_fuel(limits.fuel)
    _epoch.watch_store(store, state.should_stop)
    options = json.dumps({"max_result_bytes": limits.max_result_bytes})
    report: GuestReport | None = None
    fault: Exception | None = None
    with prepared.ticker, _hostcalls.bind(state):
        try:
            instance = prepared.linker.instantiate(store, prepared.component)
            run = instance.get_func(store, "run")
            assert run is not None, "the guest component exports no `run`"
            report = parse_report(run(store, code, options), limits.max_result_bytes)
        except (Trap, WasmtimeError) as exc:
            fault = exc
        except Exception as exc:
            fault = exc
        finally:
            state.finish()
    fuel_used = limits.fuel - store.get_fuel() if limits.fuel is not None else None
    # Closed here, not on a background thread: WASI output callbacks finalized while the
    # interpreter exits crash the process from wasmtime's threads.
    store.close()
    builder = _ResultBuilder(state, runtime.sandbox_image, limits)
    if fault is not None:
        builder.fail_with_limit(_classify_fault(fault, state, limits, fuel_used))
    elif report is not None:
        builder.take_report(report)
    for warning in dict.fromkeys(state.warnings):
        builder.diagnostics.append(
            {
                "severity": "warning",
                "code": "TOOLS_UNAVAILABLE",
                "message": warning,
                "hint": "The code ran with what was reachable; retry later for the rest.",
            }
        )
    logs = output.finish()
    if output.truncated:
        builder.diagnostics.append(
            {
                "severity": "warning",
                "code": "LOGS_TRUNCATED",
                "message": "Output over the log limits was dropped.",
                "hint": "Print less, or summarize before printing.",
            }
        )
    return builder.finish(logs, fuel_used, redactor)


def _approval_state(approvals: list[str]) -> ApprovalState:
    if "DENIED" in approvals:
        return "DENIED"
    return "APPROVED" if approvals else "NOT_REQUIRED"


def _classify_fault(fault: Exception, state: RunState, limits: Limits, fuel_used: int | None) -> str:
    message = str(fault)
    if state.stop_reason is not None:
        return state.stop_reason
    if limits.fuel is not None and fuel_used is not None and fuel_used >= limits.fuel:
        return "fuel"
    if (isinstance(fault, Trap) and "stack" in message) or "call stack exhausted" in message:
        return "stack"
    if "memory" in message and ("limit" in message or "minimum" in message or "grow" in message):
        return "memory"
    if isinstance(fault, _hostcalls.BlockingWaitRefused):
        return "blocking_wait"
    if not isinstance(fault, (Trap, WasmtimeError)):
        return f"trap:internal host error: {type(fault).__name__}: {message}"[:300]
    return "trap:" + _trap_cause(message)


def _trap_cause(message: str) -> str:
    """The informative part of a wasmtime error: its causes, not the wasm backtrace."""
    lines = [line.strip() for line in message.strip().splitlines()]
    if "Caused by:" in lines:
        causes = lines[lines.index("Caused by:") + 1 :]
        return "; ".join(line.split(":", 1)[-1].strip() if line[:1].isdigit() else line for line in causes if line)[
            :300
        ]
    useful = [line for line in lines if line and not line.startswith(("error while executing", "0x")) and ":" in line]
    return (useful[-1] if useful else lines[0] if lines else "unknown trap")[:300]


class _ResultBuilder:
    def __init__(self, state: RunState, image: str, limits: Limits) -> None:
        self.state = state
        self.image = image
        self.limits = limits
        self.ok = True
        self.data: Any = None
        self.error: ErrorInfo | None = None
        self.diagnostics: list[Diagnostic] = []

    def take_report(self, report: GuestReport) -> None:
        self.diagnostics.extend(report.diagnostics)
        if report.limit is not None:
            self.fail_with_limit(report.limit)
        elif report.ok:
            self.data = report.data
        elif report.error is not None:
            self.fail(report.error["type"], report.error["message"], report.error["retryable"])

    def fail(self, error_type: str, message: str, retryable: bool = False) -> None:
        self.ok = False
        self.error = {"type": error_type, "message": message, "retryable": retryable}

    def _sandbox_error(self, code: str, message: str, hint: str) -> None:
        self.fail("SandboxError", message)
        self.diagnostics.append(
            {"severity": "error", "code": code, "message": message, "hint": hint, "error_class": "SandboxError"}
        )

    def fail_with_limit(self, limit: str) -> None:
        if limit == "blocking_wait":
            self._sandbox_error(
                "BLOCKING_WAIT", _BLOCKING_WAIT, "Use time.sleep or asyncio (they wait through the host)."
            )
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
        )
        self.fail("SandboxLimitError", message, retryable=limit in ("timeout", "cancelled"))
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

    def finish(self, logs: list[Any], fuel_used: int | None, redactor: Redactor) -> tuple[RunResult, int]:
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
        redacted: dict[str, Any]
        redacted, found = redactor.redact(
            {"result": outcome, "logs": logs, "diagnostics": self.diagnostics, "tool_trace": self.state.tool_trace}
        )
        output = {key: value for key, value in redacted["result"].items() if key != "metrics"}
        result_json = json.dumps(output, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        result: RunResult = {
            "run_id": self.state.run_id,
            "trace_id": self.state.trace_id,
            "tool_name": TOOL_NAME,
            "tool_version": __version__,
            "input_digest": self.state.code_digest,
            "output_digest": "sha256:" + hashlib.sha256(result_json.encode()).hexdigest(),
            "sandbox_image": self.image,
            "duration_ms": duration_ms,
            "approval_state": _approval_state(self.state.approvals),
            "result": redacted["result"],
            "logs": redacted["logs"],
            "diagnostics": redacted["diagnostics"],
            "tool_trace": redacted["tool_trace"],
        }
        return result, found
