"""The process-wide runtime of any image (`ImageRuntime`), and the default image (`DefaultImage`, `Runtime`).

Compile once per machine, deserialize once per process, instantiate per run. There
is one engine per limit mode: fuel metering costs CPU-bound code about a third of
its speed, so runs without a fuel budget use an engine that does not meter at all.
Epoch interruption is on in both: the wall-clock limit always applies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Generic, TypeVar

import wasmtime
from wasmtime import Config, Engine
from wasmtime.component import Linker

from wasmexec._exceptions import BuildError
from wasmexec._process_default import process_default
from wasmexec._profiles import DEFAULT, Profile
from wasmexec._sandbox import hostcalls as _hostcalls
from wasmexec._sandbox import stack as _stack
from wasmexec._sandbox.component_builder import ComponentBuilder, component_store
from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.guest import ComponentGuest, Guest
from wasmexec._sandbox.image import HEX32, CacheFile, CacheFiles, EngineSettings, Image
from wasmexec._sandbox.image_cache import Progress
from wasmexec._sandbox.pooling import Pooling, mark_pooled
from wasmexec._sandbox.wasmtime_internals import ffi, use_pooling_allocator

#: The default image's engines (bump the format when the configuration changes).
DEFAULT_ENGINE = EngineSettings("v2")


@cache
def wasmtime_version() -> str:
    """The installed wasmtime-py version, read from its dist-info (importlib.metadata costs 20 ms)."""
    site = Path(wasmtime.__file__).resolve().parent.parent
    found = sorted(site.glob("wasmtime-*.dist-info"))
    return found[-1].name.removeprefix("wasmtime-").removesuffix(".dist-info") if found else "unknown"


def engine_key(fuel: bool, settings: EngineSettings = DEFAULT_ENGINE) -> str:
    """Names an engine configuration in compiled-artifact file names."""
    return f"wasmtime{wasmtime_version()}-{settings.format}-{'fuel' if fuel else 'nofuel'}"


def make_engine(fuel: bool, settings: EngineSettings = DEFAULT_ENGINE, pooling: Pooling | None = None) -> Engine:
    """An engine of one limit mode for an image's `settings`; on the pooling allocator with `pooling`
    (`wasmexec._sandbox.pooling`; the compiled form is the same either way, so the engine key is too)."""
    config = Config()
    config.epoch_interruption = True
    config.consume_fuel = fuel
    if settings.wasm_exceptions:
        config.wasm_exceptions = True
    config.cranelift_opt_level = "speed"
    set_wasm_stack(config)
    if pooling is None:
        return Engine(config)
    use_pooling_allocator(config, pooling.settings(gc_heap=settings.wasm_exceptions))
    engine = Engine(config)
    mark_pooled(engine)
    return engine


def set_wasm_stack(config: Config) -> None:
    """The wasm stack guest code gets (`wasmexec._sandbox.stack`: why, and the threads it runs on)."""
    # wasmtime refuses a wasm stack larger than the async one, even with async unused.
    ffi.wasmtime_config_async_stack_size_set(config.ptr(), _stack.WASM_STACK_BYTES)
    config.max_wasm_stack = _stack.WASM_STACK_BYTES


def _import_named(component: Any, engine: Engine, prefix: str) -> str | None:
    """The component's import whose name starts with `prefix` (it carries the WASI version)."""
    return next((name for name in component.type.imports(engine) if name.startswith(prefix)), None)


class DefaultImage:
    """The default image (`Image`): a componentize-py component of CPython 3.14, built on first use."""

    profile = "default"
    label = "sandbox image"
    engine = DEFAULT_ENGINE

    def __init__(self, cache_dir: Path | None, progress: Progress | None) -> None:
        self.artifacts = component_store(cache_dir, progress)

    @property
    def identity(self) -> str:
        return self.artifacts.image

    def load(self, engine: Engine, engine_key: str, ticker: EpochTicker, fuel: bool) -> ComponentGuest:
        component = self.artifacts.load_compiled(engine, engine_key)
        linker = Linker(engine)
        linker.add_wasip2()
        _hostcalls.register(linker, _import_named(component, engine, "wasi:clocks/monotonic-clock@"))
        return ComponentGuest(engine, ticker, fuel, self.artifacts.image, component, linker)

    def build(self, guest: Callable[[bool], Guest]) -> None:
        self.artifacts.sandbox_image()  # builds the component
        for fuel in (True, False):
            guest(fuel)

    def export(self, target: Path, engines: dict[str, Engine]) -> list[Path]:
        return self.artifacts.export(target, engines)

    def describe(self) -> Profile:
        return DEFAULT

    def unavailable(self, problem: BuildError) -> BuildError:
        return problem  # it builds itself on first use: a failure is the build's own


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


def cache_files() -> CacheFiles:
    """The default image's files in a cache directory (`wasmexec._sandbox.image_cache` names them)."""
    from wasmexec._sandbox.assets import guest_sources

    image = guest_sources().identity()[:32]
    keys = frozenset(engine_key(fuel) for fuel in (True, False))
    build, compiled = ComponentBuilder.names.patterns(HEX32)
    return CacheFiles((CacheFile(build, image), CacheFile(compiled, image, keys, "compiled")), prefixes=("guest-",))


G = TypeVar("G", bound=Guest)


class ImageRuntime(Generic[G]):
    """Owns one image's compiled guest, one per limit mode, made on first use. Share one per process; thread-safe."""

    def __init__(self, image: Image[G], pooling: Pooling | None = None) -> None:
        self.image = image
        self.pooling = pooling
        self.artifacts = image.artifacts
        self._guests = PerMode(self._load)

    @property
    def profile(self) -> str:
        """The profile name of its image."""
        return self.image.profile

    @property
    def sandbox_image(self) -> str:
        """The image's ``sha256:`` digest of its build inputs (the default image's: `wasmexec._sandbox.assets`)."""
        return self.image.identity

    def describe(self) -> Profile:
        """What its image offers a run (`wasmexec._profiles`)."""
        return self.image.describe()

    def guest(self, fuel: bool) -> G:
        """How a run drives the image in one limit mode (`wasmexec._sandbox.guest`); built or loaded on first use."""
        return self._guests.get(fuel)

    def prepare(self, fuel: bool) -> G:
        """The same as `guest` (its engine, compiled form, linker and ticker): the name before images were
        plug-ins, kept because `Runtime` is public."""
        return self.guest(fuel)

    def _load(self, fuel: bool) -> G:
        engine = make_engine(fuel, self.image.engine, self.pooling)
        return self.image.load(engine, engine_key(fuel, self.image.engine), EpochTicker(engine), fuel)

    def build(self, output: Path | None = None) -> list[Path]:
        """Builds and compiles every limit mode now; with `output`, writes a shippable artifact dir."""
        self.image.build(self.guest)
        if output is None:
            return []
        engines = {engine_key(fuel, self.image.engine): self.guest(fuel).engine for fuel in (True, False)}
        return self.image.export(Path(output), engines)


class Runtime(ImageRuntime[ComponentGuest]):
    """Owns the default image's compiled guest. Share one per process; it is thread-safe."""

    def __init__(
        self, cache_dir: Path | str | None = None, progress: Progress | None = None, *, pooling: Pooling | None = None
    ) -> None:
        """Args:
        cache_dir: where the built and compiled component is kept. Used as given: when it must
            be written and cannot be, that is a `BuildError`. None: the per-user cache dir,
            which falls back to a private temp dir with a warning.
        progress: receives one-line messages about builds and compiles.
        pooling: run instances on wasmtime's pooling allocator (`wasmexec._sandbox.pooling`); None: each
            instance maps its own memory (the default).
        """
        super().__init__(DefaultImage(Path(cache_dir) if cache_dir is not None else None, progress), pooling)


#: The process's shared runtime on the default cache directory.
default_runtime = process_default(Runtime)
