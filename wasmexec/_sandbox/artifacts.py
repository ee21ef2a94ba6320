"""Keeps the guest component, built and compiled, in a cache directory.

Layout of a cache (or ``wasmexec build --output``) directory::

    guest-<image>.json              manifest: sandbox_image, the component's sha256, builder
    guest-<image>.wasm              the component built by componentize-py
    <image>-<engine key>.cwasm      the component compiled for one engine configuration
    <image>-<engine key>.cwasm.json its record: component sha256, engine key, own sha256, size, mtime

``<image>`` is the start of the sandbox image, the digest of the build's inputs (see
`assets`). Compile once per machine, deserialize once per process. Files are written to
a temporary name and renamed, under a file lock, so concurrent processes never see half
a file; a directory that holds everything a process needs is only read, never locked.

Trust. A ``.cwasm`` is native code that wasmtime maps and runs without checking it, so
one is deserialized only when nobody but you (or root, who controls this process anyway)
could have put it there:

- its directory (symlinks followed: where the files really are) is owned by you or root
  and not writable by group or others;
- the file is opened without following a symlink, and that open file is a regular file
  owned by you or root and not writable by group or others; wasmtime then maps that very
  file (``/proc/self/fd``), so it cannot be swapped after the checks;
- its record, checked the same way, names the component (sha256 from the manifest) and
  the engine configuration it was compiled for.

The record also holds the ``.cwasm``'s size and sha256. Hashing 40-50 MB costs 40-100 ms
on every process start, ten times the deserialize (about 4 ms), so a file of another size
is refused at once and the digest is verified only when the mtime differs from the one
recorded when the file was written: given the ownership checks, a file with the recorded
size and mtime is the one written, unless you or root rewrote it and then reset its mtime
on purpose. Copying a directory with mtimes
kept (``cp -a``, ``rsync -a``, tar, container image layers) keeps starts fast; a plain
copy is verified at each start. A damaged or mismatched file is recompiled, not loaded.

Where files go. An explicit directory (``Runtime(cache_dir=...)``, ``--cache-dir``,
``WASMEXEC_CACHE_DIR``) is used as given: when something must be written and it cannot
be (or it is open to others), that is a `BuildError` naming the directory. Only the
default per-user directory falls back, with a warning, to ``wasmexec-cache-<uid>`` in
the temp dir, created 0700 and refused when it exists with another owner, as a symlink
or writable by others (someone may have created it first to plant compiled code).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError
from wasmexec._sandbox import trust
from wasmexec._sandbox.assets import GuestSources, builder_version, componentize, guest_sources

#: Components (and their compiled forms) kept in a cache directory: the newest few, so that two
#: installed versions can share a cache without rebuilding, and an upgrade does not leave 100+ MB behind.
KEEP_IMAGES = 3
#: The start of a sandbox image digest, as compiled artifacts of the default image are named.
_IMAGE_PREFIX = re.compile("[0-9a-f]{32}")
#: Waiting longer than a build can take for another process's lock means it is stuck.
LOCK_TIMEOUT_S = 600

Progress = Callable[[str], None]


def default_cache_dir() -> Path:
    """The per-user cache directory (XDG on Linux, the platform's convention elsewhere)."""
    if sys.platform == "linux":
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "wasmexec"
    import platformdirs

    return Path(platformdirs.user_cache_dir("wasmexec"))


@dataclass(frozen=True)
class _Build:
    """A built component found in (or written to) a directory."""

    directory: Path
    component_sha256: str


class ArtifactStore:
    """Finds, builds and compiles the guest component in one directory."""

    def __init__(
        self, directory: Path | None = None, progress: Progress | None = None, sources: GuestSources | None = None
    ) -> None:
        """Args:
        directory: the cache directory; None for the per-user default, the only one that may
            fall back to a private temp dir when it cannot be written.
        progress: receives one-line messages about builds and compiles.
        sources: the guest's sources (the installed ones by default).
        """
        self.explicit = directory is not None
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.progress: Progress = progress or (lambda message: None)
        self.sources = sources or guest_sources()
        #: The sandbox image: "sha256:" over the build's inputs, known without building.
        self.image = "sha256:" + self.sources.identity()
        self._primary = self.directory
        self._write_dir: Path | None = None
        self._found: _Build | None = None

    # -- paths -------------------------------------------------------------------------
    def _manifest_path(self, directory: Path) -> Path:
        return directory / f"guest-{self._short}.json"

    def _component_path(self, directory: Path) -> Path:
        return directory / f"guest-{self._short}.wasm"

    @property
    def _short(self) -> str:
        return self.image.removeprefix("sha256:")[:32]

    @staticmethod
    def compiled_name(image: str, engine_key: str) -> str:
        """The file name of `image` compiled for one engine configuration."""
        return f"{image.removeprefix('sha256:')[:32]}-{engine_key}.cwasm"

    # -- the component -----------------------------------------------------------------
    def sandbox_image(self) -> str:
        """The sandbox image, after making sure the component is built."""
        self._build_found()
        return self.image

    def component_bytes(self) -> bytes:
        """The built component, checked against its manifest (rebuilt when damaged)."""
        build = self._build_found()
        wasm = trust.read_trusted(self._component_path(build.directory))
        if wasm is None or hashlib.sha256(wasm).hexdigest() != build.component_sha256:
            self.progress(f"wasmexec: rebuilding: {self._component_path(build.directory)} is missing or damaged")
            build = self._found = self._build(damaged=build)
            wasm = trust.read_trusted(self._component_path(build.directory))
            if wasm is None:
                raise BuildError(f"the component just built in {build.directory} cannot be read back")
        return wasm

    def component_digest(self) -> str:
        """The built component's own ``sha256:`` (differs between builds of the same sources)."""
        return "sha256:" + self._build_found().component_sha256

    def _build_found(self) -> _Build:
        if self._found is None:
            found = (self._read_build(directory) for directory in self._readable_dirs())
            self._found = next((build for build in found if build is not None), None) or self._build()
        return self._found

    def _readable_dirs(self) -> Iterator[Path]:
        """The existing directories artifacts may be read from, in order: those only you or root can write."""
        if os.path.lexists(self._primary) and self._primary_problem() is None:
            yield self._primary  # when it is not, writing explains why (a warning or a BuildError)
        fallback = trust.fallback_dir()
        if self.explicit or not os.path.lexists(fallback):
            return  # only the default cache dir has a stand-in
        problem = trust.fallback_problem(fallback)
        if problem is None:
            yield fallback
        else:
            self.progress(f"wasmexec: not reading artifacts from {fallback}: it {problem}")

    def _primary_problem(self) -> str | None:
        # Our own default dir may have been created group-writable (umask 002) by another
        # wasmexec part: tighten it. A directory the user named is theirs to fix.
        return trust.directory_problem(self._primary, tighten=not self.explicit)

    def _read_build(self, directory: Path) -> _Build | None:
        manifest = trust.read_record(self._manifest_path(directory))
        if manifest is None or manifest.get("sandbox_image") != self.image:
            return None
        component_sha256 = manifest.get("component_sha256")
        if not trust.is_sha256(component_sha256) or not trust.is_trusted_file(self._component_path(directory)):
            return None
        return _Build(directory, str(component_sha256))

    def _build(self, damaged: _Build | None = None) -> _Build:
        directory = self._writable_directory()
        with _locked(directory):
            found = self._read_build(directory)
            if found is not None and found != damaged:  # another process built it while we waited
                return found
            self.progress("wasmexec: building the sandbox component with componentize-py (once, 15-60 s)...")
            started = time.monotonic()
            wasm = self._run_build(directory)
            component_sha256 = hashlib.sha256(wasm).hexdigest()
            _atomic_write(self._component_path(directory), wasm)
            manifest = {"sandbox_image": self.image, "component_sha256": component_sha256, "builder": builder_version()}
            _atomic_write(self._manifest_path(directory), json.dumps(manifest, indent=2).encode())
            elapsed = time.monotonic() - started
            self.progress(f"wasmexec: built {self.image[:19]}… ({len(wasm) / 1e6:.1f} MB) in {elapsed:.1f} s")
            return _Build(directory, component_sha256)

    def _run_build(self, directory: Path) -> bytes:
        with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as scratch:
            staged = Path(scratch) / "src"
            if self.sources.stage(staged) != self.image.removeprefix("sha256:"):
                raise BuildError(f"the guest sources in {self.sources.bridge_dir.parent} changed during the build")
            output = Path(scratch) / "guest.wasm"
            componentize(staged, output)
            return output.read_bytes()

    # -- where to write ----------------------------------------------------------------
    def _writable_directory(self) -> Path:
        """The directory to write to: the cache dir, or for the default one only, the private fallback."""
        if self._write_dir is not None:
            return self._write_dir
        problem, untrusted = trust.creation_problem(self._primary), False
        if problem is None:
            problem = self._primary_problem()
            untrusted = problem is not None
        if problem is None and not os.access(self._primary, os.W_OK | os.X_OK):
            problem = "is not writable"
        if problem is None:
            self._write_dir = self._primary
            return self._primary
        if self.explicit:
            raise BuildError(trust.explicit_dir_message(self._primary, problem, untrusted))
        fallback = trust.fallback_dir()
        warnings.warn(
            f"wasmexec: cache directory {self._primary} {problem}; using {fallback} "
            "(set --cache-dir / WASMEXEC_CACHE_DIR, or ship a `wasmexec build --output` directory)",
            RuntimeWarning,
            stacklevel=3,
        )
        trust.make_private_fallback(fallback)
        self.directory = self._write_dir = fallback
        return fallback

    # -- compiled artifacts --------------------------------------------------------------
    def load_compiled(self, engine: Any, engine_key: str) -> Any:
        """The component compiled for `engine`: deserialized from the cache, else compiled and cached."""
        build = self._build_found()
        name = self.compiled_name(self.image, engine_key)
        for directory in self._readable_dirs():
            component = self._deserialize(engine, directory / name, build, engine_key)
            if component is not None:
                return component
        return self._compile(engine, name, engine_key)

    @staticmethod
    def _from_file(engine: Any, path: str) -> Any:
        """Maps a checked compiled artifact (a component here; the science store's is a core module)."""
        from wasmtime.component import Component

        return Component.deserialize_file(engine, path)

    def _deserialize(self, engine: Any, path: Path, build: _Build, engine_key: str) -> Any:
        from wasmtime import WasmtimeError

        if not os.path.lexists(path):
            return None
        record = trust.read_record(Path(f"{path}.json"))
        problem = trust.binding_problem(record, build.component_sha256, engine_key)
        fd = trust.open_trusted(path) if problem is None else None
        if fd is None:
            problem = problem or "it is not a regular file that only you or root can write"
            self.progress(f"wasmexec: ignoring unusable compiled artifact {path}: {problem}")
            return None
        try:
            assert record is not None  # checked by trust.binding_problem
            if not trust.matches_record(fd, record):
                self.progress(f"wasmexec: ignoring unusable compiled artifact {path}: it differs from its record")
                return None
            return self._from_file(engine, trust.fd_path(fd, path))
        except WasmtimeError as exc:  # another machine's CPU features, or a damaged file
            self.progress(f"wasmexec: ignoring unusable compiled artifact {path}: {exc}")
            return None
        finally:
            os.close(fd)

    def _compile(self, engine: Any, name: str, engine_key: str) -> Any:
        from wasmtime import WasmtimeError
        from wasmtime.component import Component

        directory = self._writable_directory()  # before the slow part: fail fast
        wasm = self.component_bytes()
        self.progress("wasmexec: compiling the sandbox component for this machine (once, 5-25 s)...")
        started = time.monotonic()
        try:
            component = Component(engine, wasm)
        except WasmtimeError as exc:
            raise BuildError(f"wasmtime could not compile the guest component: {exc}") from exc
        with _locked(directory):
            _write_compiled(directory / name, bytes(component.serialize()), self._build_found(), engine_key)
            _prune(directory, keep_images=KEEP_IMAGES)
        self.progress(f"wasmexec: compiled in {time.monotonic() - started:.1f} s, cached in {directory}")
        return component

    def export(self, target: Path, engines: dict[str, Any]) -> list[Path]:
        """Writes a self-contained artifact directory (component + every engine's compiled form)."""
        try:
            target.mkdir(parents=True, exist_ok=True, mode=0o755)  # shipped: others may read it
        except OSError as exc:
            raise BuildError(f"cannot create the output directory {target}: {exc.strerror or exc}") from exc
        problem = trust.directory_problem(target)
        if problem is not None:
            raise BuildError(f"will not ship artifacts in {target}: it {problem}, so wasmexec would not load them")
        build = self._build_found()
        manifest = trust.read_trusted(self._manifest_path(build.directory))
        if manifest is None:
            raise BuildError(f"the manifest in {build.directory} cannot be read")
        written = [self._manifest_path(target), self._component_path(target)]
        _atomic_write(written[1], self.component_bytes())
        _atomic_write(written[0], manifest)
        for key, engine in engines.items():
            path = target / self.compiled_name(self.image, key)
            _write_compiled(path, bytes(self.load_compiled(engine, key).serialize()), build, key)
            written.append(path)
        return written


# -- writing -------------------------------------------------------------------------------


def _write_compiled(path: Path, data: bytes, build: _Build, engine_key: str) -> None:
    """Writes a compiled artifact and, after it, its record (a reader between the two recompiles)."""
    info = _atomic_write(path, data)
    record = {
        "component_sha256": build.component_sha256,
        "engine_key": engine_key,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": info.st_size,
        "mtime_ns": info.st_mtime_ns,
    }
    _atomic_write(Path(f"{path}.json"), json.dumps(record, indent=2).encode())


def _atomic_write(path: Path, data: bytes) -> os.stat_result:
    """Writes `path` by renaming a complete temporary file over it; returns the file's stat."""
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
    return os.stat(path)


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


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Holds the directory's lock file: taken only to write, so read-only dirs never get one."""
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(directory / ".lock"), timeout=LOCK_TIMEOUT_S):
            yield
    except Timeout as exc:
        raise BuildError(f"another process has held {directory / '.lock'} for {LOCK_TIMEOUT_S} s") from exc
