"""The science image's runtime: engines, the compiled snapshot, the linker (one per limit mode).

Like the default image's `wasmexec._sandbox.runtime.Runtime` (compile once per machine,
deserialize once per process, instantiate per run), for a core module: WASI preview 1
from wasmtime, the door and a refusing ``poll_oneoff`` from `door`. The engine enables
wasm exceptions (CPython 3.15 for WASI uses them) and keeps wasmtime's default wasm
stack: an 8 MiB one on the main thread crashed the host process instead of trapping.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmtime import Config, Engine, Linker

from wasmexec._sandbox.artifacts import Progress
from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.runtime import PerMode, set_wasm_stack, wasmtime_version
from wasmexec._science import door
from wasmexec._science.artifacts import ScienceArtifacts
from wasmexec._science.guest import ScienceGuest

_ENGINE_FORMAT = "s2"  # bump when the engine configuration below changes

#: Pages of guest memory the snapshot starts with (64.2 MiB): a lower memory limit cannot instantiate.
MEMORY_FLOOR_BYTES = 1027 * 65536


def engine_key(fuel: bool) -> str:
    return f"wasmtime{wasmtime_version()}-{_ENGINE_FORMAT}-{'fuel' if fuel else 'nofuel'}"


def make_engine(fuel: bool) -> Engine:
    config = Config()
    config.epoch_interruption = True
    config.consume_fuel = fuel
    config.wasm_exceptions = True
    config.cranelift_opt_level = "speed"
    set_wasm_stack(config)
    return Engine(config)


@dataclass
class SciencePrepared:
    """Everything needed to instantiate the science guest for one limit mode."""

    engine: Engine
    module: Any
    linker: Linker
    ticker: EpochTicker
    stdlib_dir: Path
    fuel: bool


class ScienceRuntime:
    """Owns the compiled science snapshot. Share one per process; it is thread-safe."""

    profile = "science"

    def __init__(self, cache_dir: Path | str | None = None, progress: Progress | None = None) -> None:
        self.artifacts = ScienceArtifacts(Path(cache_dir) if cache_dir is not None else None, progress)
        self._prepared = PerMode(self._prepare)
        self._guests = PerMode(self._guest)

    @property
    def sandbox_image(self) -> str:
        """``sha256:`` of the science image's build inputs (`artifacts.science_identity`)."""
        return self.artifacts.image

    def prepare(self, fuel: bool) -> SciencePrepared:
        """The engine, compiled snapshot and linker of one limit mode; a `BuildError` when not built."""
        return self._prepared.get(fuel)

    def guest(self, fuel: bool) -> ScienceGuest:
        """How a run drives the snapshot in one limit mode; a `BuildError` when not built."""
        return self._guests.get(fuel)

    def _guest(self, fuel: bool) -> ScienceGuest:
        prepared = self.prepare(fuel)
        return ScienceGuest(prepared.engine, prepared.ticker, fuel, self.sandbox_image, prepared.module,
                            prepared.linker, prepared.stdlib_dir, MEMORY_FLOOR_BYTES)  # fmt: skip

    def _prepare(self, fuel: bool) -> SciencePrepared:
        engine = make_engine(fuel)
        module = self.artifacts.load_compiled(engine, engine_key(fuel))
        stdlib_dir = self.artifacts.stdlib_dir()
        linker = Linker(engine)
        linker.define_wasi()
        door.register(linker)
        return SciencePrepared(engine, module, linker, EpochTicker(engine), stdlib_dir, fuel)

    def build(self, modes: tuple[bool, ...] = (True, False)) -> None:
        """Builds the snapshot and compiles it for each limit mode now (`wasmexec build --profile science`)."""
        self.artifacts.building = True
        try:
            self.artifacts.sandbox_image()
            self.artifacts.stdlib_dir()
            for fuel in modes:
                self.prepare(fuel)
        finally:
            self.artifacts.building = False


_default: ScienceRuntime | None = None
_default_lock = threading.Lock()


def default_science_runtime() -> ScienceRuntime:
    """The process's shared science runtime on the default cache directory."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ScienceRuntime()
        return _default
