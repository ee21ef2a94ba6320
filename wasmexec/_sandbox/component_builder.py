"""The default image's builder (`wasmexec._sandbox.image_cache.ImageBuilder`): componentize-py, components.

Its files in a cache directory: ``guest-<image>.json`` / ``.wasm`` and
``<image>-<engine key>.cwasm`` (+ ``.json``). It builds on first use (15-60 s), compiles
per engine (5-25 s), and after each compile keeps only the newest `KEEP_IMAGES` images.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError
from wasmexec._sandbox.assets import GuestSources, builder_version, componentize, guest_sources
from wasmexec._sandbox.image_cache import CompiledImageCache, FileNames, Progress, compile_wasm

#: Components (and their compiled forms) kept in a cache directory: the newest few, so that two
#: installed versions can share a cache without rebuilding, and an upgrade does not leave 100+ MB behind.
KEEP_IMAGES = 3
#: The start of a sandbox image digest, as compiled artifacts of the default image are named.
_IMAGE_PREFIX = re.compile("[0-9a-f]{32}")


class ComponentBuilder:
    """Builds the guest component from the bridge's sources with componentize-py."""

    builds_on_demand = True
    names = FileNames("guest-")

    def __init__(self, sources: GuestSources | None = None) -> None:
        self.sources = sources or guest_sources()
        self.identity = self.sources.identity()

    def build(self, directory: Path, image: str, progress: Progress) -> bytes:
        progress("wasmexec: building the sandbox component with componentize-py (once, 15-60 s)...")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as scratch:
            staged = Path(scratch) / "src"
            if self.sources.stage(staged) != image.removeprefix("sha256:"):
                raise BuildError(f"the guest sources in {self.sources.bridge_dir.parent} changed during the build")
            output = Path(scratch) / "guest.wasm"
            componentize(staged, output)
            wasm = output.read_bytes()
        elapsed = time.monotonic() - started
        progress(f"wasmexec: built {image[:19]}… ({len(wasm) / 1e6:.1f} MB) in {elapsed:.1f} s")
        return wasm

    def builder_version(self) -> str:
        return builder_version()

    def compile(self, engine: Any, wasm: bytes, engine_key: str, progress: Progress) -> Any:
        from wasmtime.component import Component

        progress("wasmexec: compiling the sandbox component for this machine (once, 5-25 s)...")
        return compile_wasm(Component, engine, wasm, "the guest component")

    def deserialize(self, engine: Any, path: str) -> Any:
        from wasmtime.component import Component

        return Component.deserialize_file(engine, path)

    def compiled(self, directory: Path, seconds: float) -> str:
        _prune(directory, keep_images=KEEP_IMAGES)
        return f"wasmexec: compiled in {seconds:.1f} s, cached in {directory}"

    def not_built(self, directory: Path, engine_key: str | None) -> BuildError:
        return BuildError(f"the sandbox component is not in {directory}")  # never: it builds on demand


def component_store(
    directory: Path | None = None, progress: Progress | None = None, sources: GuestSources | None = None
) -> CompiledImageCache:
    """The default image's cache in `directory` (None: the per-user default)."""
    return CompiledImageCache(ComponentBuilder(sources), directory, progress)


def _prune(directory: Path, keep_images: int) -> None:
    """Deletes all but the newest `keep_images` builds (manifest, component, compiled forms, records)."""
    manifests = sorted(directory.glob("guest-*.json"), key=lambda path: path.stat().st_mtime, reverse=True)
    for manifest in manifests[keep_images:]:
        image = _manifest_image(manifest)
        if image is None:
            continue
        forms = [*directory.glob(f"{image}-*.cwasm"), *directory.glob(f"{image}-*.cwasm.json")]
        for path in [manifest, manifest.with_suffix(".wasm"), *forms]:
            path.unlink(missing_ok=True)
    keep = {image for image in map(_manifest_image, manifests[:keep_images]) if image is not None}
    for compiled in [*directory.glob("*.cwasm"), *directory.glob("*.cwasm.json")]:
        image = compiled.name.split("-", 1)[0]
        # Only this store's own names (<image>-…): the science image's files (science-…) share the directory.
        if _IMAGE_PREFIX.fullmatch(image) and image not in keep:
            compiled.unlink(missing_ok=True)  # left by a build whose manifest is gone


def _manifest_image(manifest: Path) -> str | None:
    try:
        return str(json.loads(manifest.read_text())["sandbox_image"]).removeprefix("sha256:")[:32]
    except (OSError, ValueError, KeyError, TypeError):
        return None
