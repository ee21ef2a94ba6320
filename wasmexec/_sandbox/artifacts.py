"""Builds the guest component and keeps it, compiled, in a cache directory.

Layout of a cache (or ``wasmexec build --output``) directory::

    guest-<source hash>.json    manifest: sandbox image digest, builder version
    guest-<source hash>.wasm    the component built by componentize-py
    <image>-<engine key>.cwasm  the component compiled for one engine configuration

Compile once per machine, deserialize once per process. Files are written to a
temporary name and renamed, under a file lock, so concurrent processes never see
half a file. A directory that cannot be written (read-only home, a deployment
bundle) is only read; when something is missing there, work moves to a temp dir
with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError
from wasmexec._sandbox.assets import APP_MODULE, WORLD, GuestSources, guest_sources

#: The componentize-py release the guest is written for (pinned in pyproject.toml).
BUILDER_VERSION = "componentize-py 0.25.1"
#: A build takes about 10 s; a hung builder must not hang the host forever.
BUILD_TIMEOUT_S = 600

Progress = Callable[[str], None]


def default_cache_dir() -> Path:
    """The per-user cache directory (XDG on Linux, the platform's convention elsewhere)."""
    if sys.platform == "linux":
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "wasmexec"
    import platformdirs

    return Path(platformdirs.user_cache_dir("wasmexec"))


def _builder_version() -> str:
    """What else decides the component's content: the builder and the time-zone database."""
    try:
        import tzdata  # type: ignore[import-untyped]

        return f"{BUILDER_VERSION}; tzdata {tzdata.IANA_VERSION}"
    except ImportError:
        return BUILDER_VERSION


def _is_writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def _fallback_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"wasmexec-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


class ArtifactStore:
    """Finds, builds and compiles the guest component in one directory."""

    def __init__(
        self, directory: Path | None = None, progress: Progress | None = None, sources: GuestSources | None = None
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.progress: Progress = progress or (lambda message: None)
        self.sources = sources or guest_sources()
        self.source_hash = self.sources.source_hash(_builder_version())[:32]

    # -- paths -------------------------------------------------------------------------
    def _manifest_path(self, directory: Path) -> Path:
        return directory / f"guest-{self.source_hash}.json"

    def _component_path(self, directory: Path) -> Path:
        return directory / f"guest-{self.source_hash}.wasm"

    @staticmethod
    def compiled_name(image: str, engine_key: str) -> str:
        return f"{image.removeprefix('sha256:')[:32]}-{engine_key}.cwasm"

    # -- the component -----------------------------------------------------------------
    def sandbox_image(self) -> str:
        """The component's ``sha256:`` digest, building it first if needed."""
        manifest = self._read_manifest(self.directory)
        if manifest is None:
            manifest = self._build()
        return str(manifest["sandbox_image"])

    def component_bytes(self) -> bytes:
        self.sandbox_image()  # builds it if needed; a fallback to a temp dir moves self.directory
        path = self._component_path(self.directory)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise BuildError(f"the built component {path} cannot be read: {exc}") from exc

    def _read_manifest(self, directory: Path) -> dict[str, Any] | None:
        try:
            manifest = json.loads(self._manifest_path(directory).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or not self._component_path(directory).is_file():
            return None
        return manifest

    def _writable_directory(self) -> Path:
        if _is_writable(self.directory):
            return self.directory
        fallback = _fallback_dir()
        warnings.warn(
            f"wasmexec: cache directory {self.directory} is not writable; using {fallback} "
            "(set --cache-dir / WASMEXEC_CACHE_DIR, or ship a `wasmexec build --output` directory)",
            RuntimeWarning,
            stacklevel=3,
        )
        self.directory = fallback
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback

    def _build(self) -> dict[str, Any]:
        directory = self._writable_directory()
        with _locked(directory):
            manifest = self._read_manifest(directory)
            if manifest is not None:  # another process built it while we waited
                return manifest
            self.progress("wasmexec: building the sandbox component with componentize-py (once, 10-30 s)...")
            started = time.monotonic()
            wasm = self._run_componentize(directory)
            image = "sha256:" + hashlib.sha256(wasm).hexdigest()
            _atomic_write(self._component_path(directory), wasm)
            manifest = {"sandbox_image": image, "builder": _builder_version(), "source_hash": self.source_hash}
            _atomic_write(self._manifest_path(directory), json.dumps(manifest, indent=2).encode())
            elapsed = time.monotonic() - started
            self.progress(f"wasmexec: built {image[:19]}… ({len(wasm) / 1e6:.1f} MB) in {elapsed:.1f} s")
            return manifest

    def _run_componentize(self, directory: Path) -> bytes:
        import subprocess

        with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as scratch:
            output = Path(scratch) / "guest.wasm"
            extra = _stage_tzdata(Path(scratch) / "extra")
            command = [
                sys.executable, "-c",
                "import sys, componentize_py; sys.argv[0] = 'componentize-py'; sys.exit(componentize_py.script())",
                "-d", str(self.sources.wit_dir), "-w", WORLD,
                "componentize", APP_MODULE, "-p", str(self.sources.bridge_dir), "-p", str(extra), "-o", str(output),
            ]  # fmt: skip
            # A clean environment: componentize-py would otherwise add the active venv's
            # site-packages to the guest's module path.
            env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
            try:
                completed = subprocess.run(
                    command, cwd=scratch, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BuildError(f"componentize-py could not run: {exc}") from exc
            if completed.returncode != 0 or not output.is_file():
                tail = "\n".join((completed.stderr or completed.stdout).strip().splitlines()[-15:])
                raise BuildError(f"componentize-py failed (exit {completed.returncode}):\n{tail}")
            return output.read_bytes()

    # -- compiled artifacts --------------------------------------------------------------
    def load_compiled(self, engine: Any, engine_key: str) -> Any:
        """The component compiled for `engine`: deserialized from the cache, else compiled and cached."""
        from wasmtime import WasmtimeError
        from wasmtime.component import Component

        image = self.sandbox_image()
        name = self.compiled_name(image, engine_key)
        for directory in dict.fromkeys((self.directory, _fallback_dir())):
            path = directory / name
            if path.is_file():
                try:
                    return Component.deserialize_file(engine, str(path))
                except WasmtimeError as exc:  # another machine's CPU features, or a damaged file
                    self.progress(f"wasmexec: ignoring unusable compiled artifact {path}: {exc}")
        return self._compile(engine, name)

    def _compile(self, engine: Any, name: str) -> Any:
        from wasmtime import WasmtimeError
        from wasmtime.component import Component

        wasm = self.component_bytes()
        self.progress("wasmexec: compiling the sandbox component for this machine (once, 5-25 s)...")
        started = time.monotonic()
        try:
            component = Component(engine, wasm)
        except WasmtimeError as exc:
            raise BuildError(f"wasmtime could not compile the guest component: {exc}") from exc
        directory = self._writable_directory()
        with _locked(directory):
            _atomic_write(directory / name, bytes(component.serialize()))
            _prune(directory, keep_images=KEEP_IMAGES)
        self.progress(f"wasmexec: compiled in {time.monotonic() - started:.1f} s, cached in {directory}")
        return component

    def export(self, target: Path, engines: dict[str, Any]) -> list[Path]:
        """Writes a self-contained artifact directory (component + every engine's compiled form)."""
        target.mkdir(parents=True, exist_ok=True)
        image = self.sandbox_image()
        written = []
        for source, name in (
            (self._component_path(self.directory), self._component_path(target).name),
            (self._manifest_path(self.directory), self._manifest_path(target).name),
        ):
            _atomic_write(target / name, source.read_bytes())
            written.append(target / name)
        for key, engine in engines.items():
            component = self.load_compiled(engine, key)
            path = target / self.compiled_name(image, key)
            _atomic_write(path, bytes(component.serialize()))
            written.append(path)
        return written


def _stage_tzdata(target: Path) -> Path:
    """Copies the `tzdata` package where the build can read it (its zones go into the snapshot)."""
    import importlib.util
    import shutil

    target.mkdir(parents=True)
    spec = importlib.util.find_spec("tzdata")
    if spec is None or spec.origin is None:
        raise BuildError("the tzdata package is missing; it is a dependency of wasmexec (pip install tzdata)")
    shutil.copytree(Path(spec.origin).parent, target / "tzdata", ignore=shutil.ignore_patterns("__pycache__"))
    return target


#: Components (and their compiled forms) kept in a cache directory: the newest few, so that two
#: installed versions can share a cache without rebuilding, and an upgrade does not leave 100+ MB behind.
KEEP_IMAGES = 3


def _prune(directory: Path, keep_images: int) -> None:
    """Deletes all but the newest `keep_images` builds (manifest, component, compiled forms)."""
    manifests = sorted(directory.glob("guest-*.json"), key=lambda path: path.stat().st_mtime, reverse=True)
    keep: set[str] = set()
    for manifest in manifests[keep_images:]:
        try:
            image = str(json.loads(manifest.read_text())["sandbox_image"]).removeprefix("sha256:")[:32]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for path in [manifest, manifest.with_suffix(".wasm"), *directory.glob(f"{image}-*.cwasm")]:
            path.unlink(missing_ok=True)
    for manifest in manifests[:keep_images]:
        try:
            keep.add(str(json.loads(manifest.read_text())["sandbox_image"]).removeprefix("sha256:")[:32])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    for compiled in directory.glob("*.cwasm"):
        if compiled.name.split("-", 1)[0] not in keep:
            compiled.unlink(missing_ok=True)  # left by a build whose manifest is gone


def _atomic_write(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)  # a shipped artifact dir may be read by another user
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _locked(directory: Path) -> Any:
    from filelock import FileLock

    return FileLock(str(directory / ".lock"), timeout=BUILD_TIMEOUT_S)
