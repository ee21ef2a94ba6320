"""One run, of either image: a fresh instance, limits, workspace, the guest call, the run result.

The frame is the same for both images; what differs (the WASI context the image needs, how it is
instantiated and handed the code) is its `Guest` (`wasmexec._sandbox.guest`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from wasmtime import Trap, WasmtimeError

from wasmexec._envelope import RunResult, new_id
from wasmexec._limits import Limits
from wasmexec._redact import Redactor
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import ToolHost
from wasmexec._sandbox import hostcalls as _hostcalls
from wasmexec._sandbox.guest import Guest, GuestRuntime
from wasmexec._sandbox.instance import LiveInstance
from wasmexec._sandbox.output import OutputCapture
from wasmexec._sandbox.pooling import is_pooled
from wasmexec._sandbox.report import GuestReport
from wasmexec._sandbox.result import ResultBuilder, host_error_result
from wasmexec._sandbox.spares import close_later
from wasmexec._sandbox.stack import on_guest_stack
from wasmexec._workspace.workspace import InputError

if TYPE_CHECKING:
    from wasmexec._sandbox.spares import Spare
    from wasmexec._workspace.workspace import RunWorkspace


def execute(
    runtime: GuestRuntime,
    code: str,
    limits: Limits,
    tools: ToolHost[RunState],
    redactor: Redactor,
    state: RunState | None = None,
    workspace: RunWorkspace | None = None,
    spare: Spare | None = None,
) -> tuple[RunResult, int]:
    """Runs `code` once in a fresh sandbox of `runtime`'s image; returns the run result and how many
    secrets were redacted.

    With a `workspace` (prepared by the caller, released by the caller) the guest gets its
    /workspace and /tmp, the workspace limits are checked on every tick, and the result lists
    the artifacts. With a `spare` (`wasmexec._sandbox.spares`, of the kind this run needs) the
    run uses that instance, made and warmed up ahead, instead of making one. The whole run happens
    on a thread with room for the wasm stack (`on_guest_stack`); at its end the instance is closed on
    the spares' background thread (`close_later`). Never raises once the guest is ready: a failure on the host becomes a
    structured ``SandboxError`` result (`host_error_result`), so every run has a result to audit.

    Raises:
        BuildError: the image is not built and cannot be built here (the science image).
    """
    try:
        state = state or RunState(limits=limits, tools=tools, run_id=new_id())
        state.code_digest = "sha256:" + hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
        guest = runtime.guest(limits.fuel is not None)
    except BaseException:
        if spare is not None:
            spare.live.close()
        raise
    try:
        # The whole run on one thread (its thread-locals bind the run), one with room for the wasm stack.
        return on_guest_stack(lambda: _run(guest, code, limits, redactor, state, workspace, spare))
    except InputError:
        raise  # the caller's inputs, not the host, failed: a clear error for the caller
    except Exception as exc:
        return host_error_result(state, exc, guest.image), 0


def _run(
    guest: Guest,
    code: str,
    limits: Limits,
    redactor: Redactor,
    state: RunState,
    workspace: RunWorkspace | None,
    spare: Spare | None,
) -> tuple[RunResult, int]:
    live = spare.live if spare is not None else None  # made for this kind of run: limit mode, memory, preopens
    try:
        state.started = time.monotonic()  # the clock starts now, not while the guest was loading
        output = OutputCapture(limits.max_stdout_bytes, limits.max_stderr_bytes, state.started,
                               on_entry=state.on_output)  # fmt: skip
        if limits.memory_bytes < guest.memory_floor_bytes:  # instantiation would fail with a wasmtime error
            too_small = GuestReport(False, limit="memory")
            return build_result(state, guest.image, limits, too_small, None, 0, output, redactor)
        if workspace is not None:
            passed = workspace.prepare(spare.run_dir if spare is not None else None)
            if passed is not None:  # the inputs alone pass a workspace limit: the code does not run
                builder = ResultBuilder(state, guest.image, limits)
                builder.fail_with_limit(passed)
                return builder.finish([], None, redactor)
        if live is None and workspace is None:
            live = LiveInstance(guest, limits.memory_bytes)
        elif live is None and workspace is not None:
            live = LiveInstance(guest, limits.memory_bytes, every_ticks=1, preopen=workspace.preopen)
        assert live is not None
        decide = state.should_stop if workspace is None else _stop_or_quota(state, workspace)
        guest_options: dict[str, object] = {"max_result_bytes": limits.max_result_bytes, **guest.run_options}
        if workspace is not None:
            guest_options.update(workspace.guest_options())
        options = json.dumps(guest_options)
        report: GuestReport | None = None
        fault: Exception | None = None
        with guest.ticker, _hostcalls.bind(state):
            try:
                live.start(limits, output, decide)
                report = live.invoke(code, options, limits.max_result_bytes)
            except Exception as exc:
                fault = exc
            finally:
                state.finish()
        fuel_used = limits.fuel - live.fuel_left() if limits.fuel is not None else None
        live.stop()  # the guest has stopped: nothing more reaches the run's output
        return build_result(state, guest.image, limits, report, fault, fuel_used, output, redactor, workspace)
    finally:
        if live is not None:
            live.stop()
            if is_pooled(guest.engine):
                live.close()  # its pool slot is free when the run returns: the next run may need exactly that slot
            else:
                # Closed on the spares' thread, off the run's path (0.3 ms). The segfault once blamed on a close
                # there was the tests' tracemalloc race; tests/integration/test_store_close_stress.py shows it holds.
                close_later(live)


def build_result(
    state: RunState,
    image: str,
    limits: Limits,
    report: GuestReport | None,
    fault: Exception | None,
    fuel_used: int | None,
    output: OutputCapture,
    redactor: Redactor,
    workspace: RunWorkspace | None = None,
) -> tuple[RunResult, int]:
    """The run result once the guest has stopped: its fault or report, the host's limits, artifacts and logs.

    Also the result of a run stopped before its guest started.
    """
    builder = ResultBuilder(state, image, limits)
    if fault is not None:
        reason = _classify_fault(fault, state, limits, fuel_used)
        if reason is None:
            builder.fail_internal(fault)
        else:
            builder.fail_with_limit(reason)
    elif state.stop_reason is not None:
        # The guest finished, but only after its deadline or a cancellation reached it in a host
        # wait (a final sleep returns at the deadline): the limit fired, whatever the guest says.
        builder.fail_with_limit(state.stop_reason)
    elif report is not None:
        builder.take_report(report)
    if workspace is not None:
        _collect_artifacts(builder, workspace)
    logs = output.finish()
    builder.add_host_warnings(state.warnings, output.truncated)
    return builder.finish(logs, fuel_used, redactor)


def _collect_artifacts(builder: ResultBuilder, workspace: RunWorkspace) -> None:
    """The workspace limits checked once more after the guest stopped, and its artifacts listed."""
    passed = builder.limit is not None and builder.limit.startswith("workspace_")
    reason, artifacts, symlinks = workspace.collect(list_artifacts=not passed)
    if reason is not None and builder.limit is None:
        builder.fail_with_limit(reason)  # passed in the last tick, or by one pwrite
    builder.artifacts = artifacts
    builder.add_symlink_warning(symlinks)


def _stop_or_quota(state: RunState, workspace: RunWorkspace) -> Callable[[], str | None]:
    """The deadline question of a workspace run: a stop reason, else a workspace limit passed."""

    def decide() -> str | None:
        reason = state.should_stop()
        if reason is None:
            passed = workspace.check()
            if passed is not None:
                state.stop(passed)
                return passed
        return reason

    return decide


#: How wasmtime's pooling allocator says it has no free slot (`wasmexec._sandbox.pooling`).
_POOL_FULL = "maximum concurrent"


def _classify_fault(fault: Exception, state: RunState, limits: Limits, fuel_used: int | None) -> str | None:
    """Why the guest stopped: a limit, ``blocking_wait``, ``busy``, ``trap:<cause>``; None for a bug on the host.

    The host's own stop reason comes first (set before the trap it causes): a limit, a
    cancellation, or ``blocking_wait`` when a host call refused a blocking WASI wait.
    """
    if state.stop_reason is not None:
        return state.stop_reason
    message = str(fault)
    if isinstance(fault, WasmtimeError) and not isinstance(fault, Trap) and _POOL_FULL in message:
        return "busy"  # wasmtime's own instantiation error: every slot of the pooling allocator is taken
    if limits.fuel is not None and fuel_used is not None and fuel_used >= limits.fuel:
        return "fuel"
    if (isinstance(fault, Trap) and "stack" in message) or "call stack exhausted" in message:
        return "stack"
    if "memory" in message and ("limit" in message or "minimum" in message or "grow" in message):
        return "memory"
    if not isinstance(fault, (Trap, WasmtimeError)):
        return None
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
