"""The compiled-image cache: keeps any image, built and compiled, in a cache directory.

It knows nothing about how an image is built: an `ImageBuilder` names the files, builds
the wasm and compiles it (the default image's: `wasmexec._sandbox.component_builder`; the
science image's: `wasmexec._science.snapshot_builder`). Layout of a cache (or ``wasmexec
build --output``) directory, with the default image's names::

    guest-<image>.json              manifest: sandbox_image, the wasm's sha256, builder
    guest-<image>.wasm              the built wasm (here: the component built by componentize-py)
    <image>-<engine key>.cwasm      the wasm compiled for one engine configuration
    <image>-<engine key>.cwasm.json its record: wasm sha256, engine key, own sha256, size, mtime

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
from typing import Any, Protocol

from wasmexec._exceptions import BuildError
from wasmexec._sandbox import trust

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


@dataclass(frozen=True)
class FileNames:
    """How one image's files are named: ``<build><image>.json`` (manifest), ``<build><image>.wasm`` and
    ``<compiled><image>-<engine key>.cwasm``, where ``<image>`` is the digest's first 32 hex digits."""

    build: str
    """The manifest's and the wasm's prefix, e.g. ``guest-``."""
    compiled: str = ""
    """The compiled forms' prefix (the default image's have none: the names its caches already hold)."""

    def manifest(self, short: str) -> str:
        return f"{self.build}{short}.json"

    def wasm(self, short: str) -> str:
        return f"{self.build}{short}.wasm"

    def compiled_form(self, short: str, engine_key: str) -> str:
        return f"{self.compiled}{short}-{engine_key}.cwasm"

    def patterns(self, hex32: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
        """The build's files (manifest, wasm) and the compiled forms (and records), as `CacheFile` patterns."""
        build, compiled = re.escape(self.build), re.escape(self.compiled)
        return (re.compile(rf"{build}(?P<image>{hex32})\.(?:json|wasm)"),
                re.compile(rf"{compiled}(?P<image>{hex32})-(?P<key>[^/]+?)\.cwasm(?:\.json)?"))  # fmt: skip


class ImageBuilder(Protocol):
    """How one image is named, built and compiled: all the cache needs to know of it."""

    identity: str
    """The hex digest of the build's inputs (the sandbox image without ``sha256:``)."""
    builds_on_demand: bool
    """Whether a missing build or compiled form is made on first use, or is a `not_built` error
    (made only inside `CompiledImageCache.building`)."""
    names: FileNames
    """Its files' names."""

    def build(self, directory: Path, image: str, progress: Progress) -> bytes:
        """Builds the wasm (scratch files below `directory`), saying what it does; a `BuildError` if it cannot."""
        ...

    def builder_version(self) -> str:
        """What built it, for the manifest."""
        ...

    def compile(self, engine: Any, wasm: bytes, engine_key: str, progress: Progress) -> Any:
        """Compiles the wasm for `engine`, saying so first; a `BuildError` if wasmtime cannot."""
        ...

    def deserialize(self, engine: Any, path: str) -> Any:
        """Maps a checked compiled form (a component, or a core module)."""
        ...

    def compiled(self, directory: Path, seconds: float) -> str:
        """Called under the lock after a compiled form is written (to prune old ones); the progress line."""
        ...

    def not_built(self, directory: Path, engine_key: str | None) -> BuildError:
        """The error when the build (None) or a compiled form is missing and is not made on demand."""
        ...


class CompiledImageCache:
    """Finds, builds (through its `ImageBuilder`) and compiles one image in one directory."""

    def __init__(self, builder: ImageBuilder, directory: Path | None = None, progress: Progress | None = None) -> None:
        """Args:
        builder: names, builds and compiles the image.
        directory: the cache directory; None for the per-user default, the only one that may
            fall back to a private temp dir when it cannot be written.
        progress: receives one-line messages about builds and compiles.
        """
        self.builder = builder
        self.explicit = directory is not None
        # Absolute now: the build runs componentize-py in another working directory (a relative path broke it).
        self.directory = Path(directory).absolute() if directory is not None else default_cache_dir()
        self.progress: Progress = progress or (lambda message: None)
        #: The sandbox image: "sha256:" over the build's inputs, known without building.
        self.image = "sha256:" + builder.identity
        self._primary = self.directory
        self._write_dir: Path | None = None
        self._found: _Build | None = None
        self._building = builder.builds_on_demand

    @contextmanager
    def building(self) -> Iterator[None]:
        """Within it, a missing build or compiled form is made (`wasmexec build`), whatever the builder says."""
        before, self._building = self._building, True
        try:
            yield
        finally:
            self._building = before

    @property
    def may_build(self) -> bool:
        """Whether something missing may be made now."""
        return self._building

    # -- paths -------------------------------------------------------------------------
    def _manifest_path(self, directory: Path) -> Path:
        return directory / self.builder.names.manifest(self._short)

    def _component_path(self, directory: Path) -> Path:
        return directory / self.builder.names.wasm(self._short)

    @property
    def _short(self) -> str:
        return self.image.removeprefix("sha256:")[:32]

    def compiled_name(self, image: str, engine_key: str) -> str:
        """The file name of `image` compiled for one engine configuration."""
        return self.builder.names.compiled_form(image.removeprefix("sha256:")[:32], engine_key)

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
            found = (self._read_build(directory) for directory in self.readable_dirs())
            self._found = next((build for build in found if build is not None), None) or self._build()
        return self._found

    def readable_dirs(self) -> Iterator[Path]:
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
        if not self.may_build:
            raise self.builder.not_built(self.directory, None)
        directory = self.writable_directory()
        with locked(directory):
            found = self._read_build(directory)
            if found is not None and found != damaged:  # another process built it while we waited
                return found
            wasm = self.builder.build(directory, self.image, self.progress)
            component_sha256 = hashlib.sha256(wasm).hexdigest()
            atomic_write(self._component_path(directory), wasm)
            manifest = {"sandbox_image": self.image, "component_sha256": component_sha256,
                        "builder": self.builder.builder_version()}  # fmt: skip
            atomic_write(self._manifest_path(directory), json.dumps(manifest, indent=2).encode())
            return _Build(directory, component_sha256)

    # -- where to write ----------------------------------------------------------------
    def writable_directory(self) -> Path:
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
        for directory in self.readable_dirs():
            component = self._deserialize(engine, directory / name, build, engine_key)
            if component is not None:
                return component
        return self._compile(engine, name, engine_key)

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
            _refresh_mtime(path, record, os.fstat(fd))
            return self.builder.deserialize(engine, trust.fd_path(fd, path))
        except WasmtimeError as exc:  # another machine's CPU features, or a damaged file
            self.progress(f"wasmexec: ignoring unusable compiled artifact {path}: {exc}")
            return None
        finally:
            os.close(fd)

    def _compile(self, engine: Any, name: str, engine_key: str) -> Any:
        if not self.may_build:
            raise self.builder.not_built(self.directory, engine_key)
        directory = self.writable_directory()  # before the slow part: fail fast
        wasm = self.component_bytes()
        started = time.monotonic()
        compiled = self.builder.compile(engine, wasm, engine_key, self.progress)
        del wasm  # the science snapshot's is 136 MB
        with locked(directory):
            write_compiled(directory / name, bytes(compiled.serialize()), self._build_found(), engine_key)
            message = self.builder.compiled(directory, time.monotonic() - started)
        self.progress(message)
        return compiled

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
        atomic_write(written[1], self.component_bytes())
        atomic_write(written[0], manifest)
        for key, engine in engines.items():
            path = target / self.compiled_name(self.image, key)
            write_compiled(path, bytes(self.load_compiled(engine, key).serialize()), build, key)
            written.append(path)
        return written


def compile_wasm(compile: Callable[[Any, bytes], Any], engine: Any, wasm: bytes, what: str) -> Any:
    """`compile(engine, wasm)` (a builder's compile), with wasmtime's error as a `BuildError` naming `what`."""
    from wasmtime import WasmtimeError

    try:
        return compile(engine, wasm)
    except WasmtimeError as exc:
        raise BuildError(f"wasmtime could not compile {what}: {exc}") from exc


# -- writing -------------------------------------------------------------------------------


def write_compiled(path: Path, data: bytes, build: _Build, engine_key: str) -> None:
    """Writes a compiled artifact and, after it, its record (a reader between the two recompiles)."""
    info = atomic_write(path, data)
    record = {
        "component_sha256": build.component_sha256,
        "engine_key": engine_key,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": info.st_size,
        "mtime_ns": info.st_mtime_ns,
    }
    _write_record(path, record)


def _write_record(path: Path, record: dict[str, Any]) -> None:
    """Writes the record of the compiled artifact at `path` (next to it, ``.json``)."""
    atomic_write(Path(f"{path}.json"), json.dumps(record, indent=2).encode())


def _refresh_mtime(path: Path, record: dict[str, Any], info: os.stat_result) -> None:
    """A file that matched its record by its sha256 (a copy or an unpacking gave it a new mtime) gets its
    record's mtime brought up to date, so later loads skip hashing it again (57 MB, 55 ms per process; 390 MB
    for the science image). Best effort: a read-only cache keeps hashing."""
    if info.st_mtime_ns == record.get("mtime_ns") or not os.access(path.parent, os.W_OK):
        return
    try:
        _write_record(path, {**record, "mtime_ns": info.st_mtime_ns})
    except OSError:
        pass


def atomic_write(path: Path, data: bytes) -> os.stat_result:
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


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Holds the directory's lock file: taken only to write, so read-only dirs never get one."""
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(directory / ".lock"), timeout=LOCK_TIMEOUT_S):
            yield
    except Timeout as exc:
        raise BuildError(f"another process has held {directory / '.lock'} for {LOCK_TIMEOUT_S} s") from exc
