"""Keeps the artifacts of finished runs so their bytes can be read later, within bounded retention.

Files are stored by content digest under one directory per run (``<root>/<run_id>/<sha256>``),
so no name the guest chose is ever a host path. Retention is bounded by the number of
artifacts, their total bytes and their age; the least recently used run goes first
(a run's artifacts are kept or dropped together). A run whose artifacts alone pass the
byte or count bound is not kept. Thread-safe: one lock guards the index; files are
copied outside it.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from wasmexec._envelope import Artifact
from wasmexec._workspace import safefs

#: Enough for an agent to come back to the last few dozen runs' outputs.
DEFAULT_MAX_ARTIFACTS = 256
#: A few default-sized workspaces.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: An hour: a conversation's follow-up questions, not an archive.
DEFAULT_MAX_AGE_S = 3600.0

#: A run id as the stores accept it (a directory name that is never a path).
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


class RetentionBounds(TypedDict, total=False):
    """`ArtifactStore`'s retention bounds, for stores built on it to pass along unchanged."""

    max_artifacts: int
    max_bytes: int
    max_age_s: float


@dataclass(frozen=True)
class StoredArtifact:
    """One kept artifact."""

    run_id: str
    path: str
    size: int
    sha256: str
    mime_type: str
    stored_at: float
    """When it was kept, by the store's timer."""


@dataclass
class _Run:
    artifacts: dict[str, StoredArtifact]
    directory: Path
    size: int
    stored_at: float


class ArtifactStore:
    """Artifacts of finished runs, read by run id and path (see the module)."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        max_artifacts: int = DEFAULT_MAX_ARTIFACTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        """
        Args:
            directory: an existing directory the store owns (it keeps one subdirectory per run);
                by default a private (0700) temporary directory, made on first use and removed at exit.
            max_artifacts: artifacts kept at most, over all runs.
            max_bytes: their total size at most.
            max_age_s: seconds an artifact is kept at most.
            timer: the clock of `max_age_s` (injectable for tests).
        """
        for name, value in (("max_artifacts", max_artifacts), ("max_bytes", max_bytes), ("max_age_s", max_age_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"ArtifactStore {name} must be a number >= 0, got {value!r}")
        self._directory = Path(directory) if directory is not None else None
        self._made: Path | None = None  # the default directory, once made: `close` removes it
        self.max_artifacts = max_artifacts
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self._timer = timer
        self._runs: OrderedDict[str, _Run] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self._count = 0
        self._bytes = 0

    # -- writing ---------------------------------------------------------------------------
    def _admits(self, run_id: str, artifacts: Sequence[Artifact]) -> bool:
        """Whether a run's artifacts fit the count and byte bounds at all (a run that alone passes them is
        not kept); a ValueError for a `run_id` that is not 1-128 letters, digits, ``-`` or ``_``."""
        if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
            raise ValueError(f"run_id must be 1-128 letters, digits, '-' or '_', got {run_id!r}")
        total = sum(int(a["size"]) for a in artifacts)
        return bool(artifacts) and len(artifacts) <= self.max_artifacts and total <= self.max_bytes

    def put(self, run_id: str, workspace: int | str | os.PathLike[str], artifacts: Sequence[Artifact],
            *, move: bool = False) -> list[StoredArtifact]:  # fmt: skip
        """Keeps the files `artifacts` names, read from `workspace` (a directory or its descriptor).

        Each file is read without following any symlink and kept only if its sha256 and size are
        still the ones listed. `move` renames files instead of copying them (for a workspace that is
        about to be removed; falls back to a copy across file systems). Returns what was kept.

        Raises:
            ValueError: `run_id` is not 1-128 letters, digits, ``-`` or ``_``.
        """
        if not self._admits(run_id, artifacts):
            return []
        root_fd = workspace if isinstance(workspace, int) else safefs.open_root(workspace)
        target = Path(tempfile.mkdtemp(prefix=f"{run_id}.", dir=self._root()))
        kept: dict[str, StoredArtifact] = {}
        now = self._timer()
        try:
            for artifact in artifacts:
                if self._keep(root_fd, artifact, target, move):
                    kept[artifact["path"]] = StoredArtifact(run_id, artifact["path"], artifact["size"],
                                                            artifact["sha256"], artifact["mime_type"], now)  # fmt: skip
        finally:
            if not isinstance(workspace, int):
                os.close(root_fd)
        self._register(run_id, _Run(kept, target, sum(a.size for a in kept.values()), now))
        return list(kept.values())

    def _keep(self, root_fd: int, artifact: Artifact, target: Path, move: bool) -> bool:
        name = artifact["sha256"]
        if not isinstance(name, str) or not re.fullmatch(r"[0-9a-f]{64}", name):
            return False
        destination = target / name
        if destination.exists():
            return True  # the same content under another path
        staged = target / (name + ".part")
        try:
            parts = safefs.split_relative(artifact["path"])
            if not (move and _moved(root_fd, parts, staged)):
                with safefs.opened_file(root_fd, parts) as (fd, info), open(staged, "xb") as out:
                    left = info.st_size
                    while left > 0 and (chunk := os.read(fd, min(safefs.CHUNK_BYTES, left))):
                        out.write(chunk)
                        left -= len(chunk)
            if _digest_of(staged, artifact["size"]) != name:
                staged.unlink()
                return False
            os.rename(staged, destination)
            return True
        except (OSError, ValueError):
            staged.unlink(missing_ok=True)
            return False

    def _register(self, run_id: str, run: _Run) -> None:
        dropped: list[Path] = []
        with self._lock:
            if run_id in self._runs:
                dropped.append(self._drop_locked(run_id))
            if run.artifacts:
                self._runs[run_id] = run
                self._count += len(run.artifacts)
                self._bytes += run.size
            else:
                dropped.append(run.directory)
            dropped.extend(self._evict_locked())
        for directory in dropped:
            shutil.rmtree(directory, ignore_errors=True)

    def _evict_locked(self) -> list[Path]:
        """Drops expired runs, then least recently used ones while over a bound; returns their directories."""
        oldest = self._timer() - self.max_age_s
        expired = [run_id for run_id, run in self._runs.items() if run.stored_at < oldest]
        dropped = [self._drop_locked(run_id) for run_id in expired]
        while self._runs and (self._count > self.max_artifacts or self._bytes > self.max_bytes):
            dropped.append(self._drop_locked(next(iter(self._runs))))
        return dropped

    def _drop_locked(self, run_id: str) -> Path:
        run = self._runs.pop(run_id)
        self._count -= len(run.artifacts)
        self._bytes -= run.size
        return run.directory

    # -- reading ---------------------------------------------------------------------------
    def list(self, run_ids: Iterable[str] | None = None) -> list[StoredArtifact]:
        """The artifacts kept now (of `run_ids` only, if given), most recently used run last."""
        self._expire()
        wanted = set(run_ids) if run_ids is not None else None
        with self._lock:
            return [artifact for run_id, run in self._runs.items() if wanted is None or run_id in wanted
                    for artifact in run.artifacts.values()]  # fmt: skip

    def get(self, run_id: str, path: str) -> StoredArtifact:
        """The entry of one kept artifact (marks its run as recently used).

        Raises:
            KeyError: no such run or path is kept (never was, or evicted).
        """
        self._expire()
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or path not in run.artifacts:
                raise KeyError(f"no artifact {path!r} of run {run_id!r} is kept (unknown, or evicted)")
            self._runs.move_to_end(run_id)
            return run.artifacts[path]

    def file_path(self, run_id: str, path: str) -> Path:
        """Where the bytes of one kept artifact are on the host (valid until it is evicted).

        Raises:
            KeyError: as `get`.
        """
        artifact = self.get(run_id, path)
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                raise KeyError(f"no artifact {path!r} of run {run_id!r} is kept (evicted)")
            return run.directory / artifact.sha256

    def read(self, run_id: str, path: str) -> bytes:
        """The bytes of one kept artifact.

        Raises:
            KeyError: as `get` (also when it is evicted while being read).
        """
        location = self.file_path(run_id, path)
        try:
            return location.read_bytes()
        except OSError:
            raise KeyError(f"no artifact {path!r} of run {run_id!r} is kept (evicted)") from None

    def forget(self, run_id: str) -> None:
        """Drops every artifact of a run (nothing happens for an unknown run)."""
        with self._lock:
            directory = self._drop_locked(run_id) if run_id in self._runs else None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def _expire(self) -> None:
        with self._lock:
            dropped = self._evict_locked()
        for directory in dropped:
            shutil.rmtree(directory, ignore_errors=True)

    def close(self) -> None:
        """Drops everything kept, and removes the default directory if the store made one. Idempotent."""
        with self._lock:
            runs, self._runs = list(self._runs.values()), OrderedDict()
            self._count = self._bytes = 0
            made, self._made = self._made, None
            if made is not None:
                self._directory = None  # a later `put` makes a new one
        for run in runs:
            shutil.rmtree(run.directory, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)

    def _root(self) -> Path:
        with self._lock:
            if self._directory is None:
                self._directory = self._made = Path(tempfile.mkdtemp(prefix="wasmexec-artifacts-"))
                atexit.register(shutil.rmtree, self._directory, True)
            return self._directory


def _moved(root_fd: int, parts: tuple[str, ...], staged: Path) -> bool:
    """Renames the workspace file `parts` to `staged` (False across file systems or for a non-file)."""
    try:
        with safefs.opened_dir(root_fd, parts[:-1]) as parent:
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                return False
            os.rename(parts[-1], staged, src_dir_fd=parent)
        return True
    except OSError:
        return False


def _digest_of(staged: Path, size: int) -> str | None:
    """The sha256 of a file the store just wrote or moved in: a regular file of `size` bytes."""
    fd = os.open(staged, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            return None
        digest = hashlib.sha256()
        while chunk := os.read(fd, safefs.CHUNK_BYTES):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)
