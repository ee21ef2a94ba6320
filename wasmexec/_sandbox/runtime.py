"""The process-wide runtime: wasmtime engines, the compiled component, linkers.

Compile once per machine, deserialize once per process, instantiate per run. There
is one engine per limit mode: fuel metering costs CPU-bound code about a third of
its speed, so runs without a fuel budget use an engine that does not meter at all.
Epoch interruption is on in both: the wall-clock limit always applies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Generic, TypeVar

import wasmtime
from wasmtime import Config, Engine
from wasmtime.component import Linker

from wasmexec._sandbox import hostcalls as _hostcalls
from wasmexec._sandbox import stack as _stack
from wasmexec._sandbox.artifacts import ArtifactStore, Progress
from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.guest import ComponentGuest
from wasmexec._sandbox.wasmtime_internals import ffi

_ENGINE_FORMAT = "v2"  # bump when the engine configuration below changes


@cache
def wasmtime_version() -> str:
    """The installed wasmtime-py version, read from its dist-info (importlib.metadata costs 20 ms)."""
    site = Path(wasmtime.__file__).resolve().parent.parent
    found = sorted(site.glob("wasmtime-*.dist-info"))
    return found[-1].name.removeprefix("wasmtime-").removesuffix(".dist-info") if found else "unknown"


def engine_key(fuel: bool) -> str:
    """Names an engine configuration in compiled-artifact file names."""
    return f"wasmtime{wasmtime_version()}-{_ENGINE_FORMAT}-{'fuel' if fuel else 'nofuel'}"


def make_engine(fuel: bool) -> Engine:
    config = Config()
    config.epoch_interruption = True
    config.consume_fuel = fuel
    config.cranelift_opt_level = "speed"
    set_wasm_stack(config)
    return Engine(config)


def set_wasm_stack(config: Config) -> None:
    """The wasm stack guest code gets (`wasmexec._sandbox.stack`: why, and the threads it runs on)."""
    # wasmtime refuses a wasm stack larger than the async one, even with async unused.
    ffi.wasmtime_config_async_stack_size_set(config.ptr(), _stack.WASM_STACK_BYTES)
    config.max_wasm_stack = _stack.WASM_STACK_BYTES


def _import_named(component: Any, engine: Engine, prefix: str) -> str | None:
    """The component's import whose name starts with `prefix` (it carries the WASI version)."""
    return next((name for name in component.type.imports(engine) if name.startswith(prefix)), None)


@dataclass
class Prepared:
    """Everything needed to instantiate the guest for one limit mode."""

    engine: Engine
    component: Any
    linker: Linker
    ticker: EpochTicker
    fuel: bool


T = TypeVar("T")


class PerMode(Generic[T]):
    """One value per limit mode (fuel on or off), made on first use; thread-safe, made once."""

    def __init__(self, make: Callable[[bool], T]) -> None:
        self._make = make
        self._made: dict[bool, T] = {}
        self._lock = threading.Lock()

    def get(self, fuel: bool) -> T:
        made = self._made.get(fuel)
        if made is not None:  # the common case takes no lock
            return made
        with self._lock:
            if fuel not in self._made:
                self._made[fuel] = self._make(fuel)
            return self._made[fuel]


class Runtime:
    """Owns the compiled guest. Share one per process; it is thread-safe."""

    def __init__(self, cache_dir: Path | str | None = None, progress: Progress | None = None) -> None:
        """Args:
        cache_dir: where the built and compiled component is kept. Used as given: when it must
            be written and cannot be, that is a `BuildError`. None: the per-user cache dir,
            which falls back to a private temp dir with a warning.
        progress: receives one-line messages about builds and compiles.
        """
        self.artifacts = ArtifactStore(Path(cache_dir) if cache_dir is not None else None, progress)
        self._prepared = PerMode(self._prepare)
        self._guests = PerMode(self._guest)

    @property
    def sandbox_image(self) -> str:
        """The guest image's ``sha256:`` digest of its build inputs (see `wasmexec._sandbox.assets`)."""
        return self.artifacts.image

    def prepare(self, fuel: bool) -> Prepared:
        """The engine, component and linker of one limit mode; built or loaded on first use."""
        return self._prepared.get(fuel)

    def guest(self, fuel: bool) -> ComponentGuest:
        """How a run drives the image in one limit mode (`wasmexec._sandbox.guest`); built or loaded on first use."""
        return self._guests.get(fuel)

    def _guest(self, fuel: bool) -> ComponentGuest:
        prepared = self.prepare(fuel)
        return ComponentGuest(prepared.engine, prepared.ticker, fuel, self.sandbox_image, prepared.component,
                              prepared.linker)  # fmt: skip

    def _prepare(self, fuel: bool) -> Prepared:
        engine = make_engine(fuel)
        component = self.artifacts.load_compiled(engine, engine_key(fuel))
        linker = Linker(engine)
        linker.add_wasip2()
        _hostcalls.register(linker, _import_named(component, engine, "wasi:clocks/monotonic-clock@"))
        return Prepared(engine, component, linker, EpochTicker(engine), fuel)

    def build(self, output: Path | None = None) -> list[Path]:
        """Builds and compiles every limit mode now; with `output`, writes a shippable artifact dir."""
        self.artifacts.sandbox_image()  # builds the component
        for fuel in (True, False):
            self.prepare(fuel)
        if output is None:
            return []
        engines = {engine_key(fuel): self.prepare(fuel).engine for fuel in (True, False)}
        return self.artifacts.export(Path(output), engines)


_default: Runtime | None = None
_default_lock = threading.Lock()


def default_runtime() -> Runtime:
    """The process's shared runtime on the default cache directory."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Runtime()
        return _default
