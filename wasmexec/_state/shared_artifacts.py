"""The artifacts behind ``wasmexec://`` resources, kept sealed in the state directory for every replica.

`SharedArtifactStore` is an `ArtifactStore` whose runs live on disk, not in a process's
index, so a resource made on one replica is listed and read on any other, and after a
restart. One directory per run under ``DIR/artifacts``::

    <run_id>/index      sealed: the run's artifacts (path, size, sha256, type); paths are the guest's names
    <run_id>/owner      sealed: the caller the run belongs to (written once the run's result is built)
    <run_id>/<sha256>   sealed: one file's bytes, bound to the run and the digest
    <run_id>/used       its mtime is the run's last read (least recently used goes first)

A run is made under a temporary name and renamed into place (never half-made), and every
sealed file is bound to its run and name, so none can be moved to another run. A run
without an `owner` yet belongs to nobody: nothing lists or reads it. Retention is bounded
by count, bytes and age over the whole directory; whichever replica notices first removes
what is over (one at a time: a non-blocking lock on the directory), renaming a run away
before deleting it, so a reader finds it whole or not at all.

Sealing costs one AES-GCM pass (over a gigabyte per second) on top of the copy the store
already makes, and keeps file contents and guest-chosen names off the shared volume in clear.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from typing_extensions import Unpack

from wasmexec._envelope import Artifact
from wasmexec._state.directory import remove_now
from wasmexec._state.key import SealError, StateKey
from wasmexec._state.sealed import (
    OpeningReader,
    SealingWriter,
    no_follow,
    private_file,
    read_sealed,
    write_sealed,
)
from wasmexec._workspace import safefs
from wasmexec._workspace.store import RUN_ID, ArtifactStore, RetentionBounds, StoredArtifact

_DIGEST = re.compile(r"[0-9a-f]{64}")
#: An index lists at most the store's artifacts; its JSON stays far below this.
_MAX_INDEX_BYTES = 16 * 1024 * 1024
_MAX_OWNER_BYTES = 1024
#: A run made under a temporary name that is older than this was left by a process that died.
_STALE_S = 600.0


class SharedArtifactStore(ArtifactStore):
    """Artifacts of finished runs, sealed on a directory that several processes share (see the module)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        key: StateKey,
        *,
        timer: Callable[[], float] = time.time,
        **bounds: Unpack[RetentionBounds],
    ) -> None:
        """
        Args:
            directory: ``DIR/artifacts`` of the state directory (made 0700 if missing).
            key: the state key (the same on every replica).
            timer: the wall clock of `max_age_s` (replicas compare its values).
            bounds: `ArtifactStore`'s retention bounds, over the whole directory.
        """
        super().__init__(directory, timer=timer, **bounds)
        self.root = Path(directory)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._sealer = key.sealer("artifacts")

    # -- writing ---------------------------------------------------------------------------
    def put(self, run_id: str, workspace: int | str | os.PathLike[str], artifacts: Sequence[Artifact],
            *, move: bool = False) -> list[StoredArtifact]:  # fmt: skip
        """Seals the files `artifacts` names into the run's directory (see `ArtifactStore.put`)."""
        if not self._admits(run_id, artifacts):
            return []
        root_fd = workspace if isinstance(workspace, int) else safefs.open_root(workspace)
        staging = self.root / f".new-{run_id}.{secrets.token_hex(4)}"
        now = self._timer()
        kept: dict[str, StoredArtifact] = {}
        try:
            staging.mkdir(mode=0o700)
            for artifact in artifacts:
                if self._sealed_copy(root_fd, artifact, run_id, staging):
                    kept[artifact["path"]] = StoredArtifact(run_id, artifact["path"], artifact["size"],
                                                            artifact["sha256"], artifact["mime_type"], now)  # fmt: skip
            if kept:
                index = [[a.path, a.size, a.sha256, a.mime_type] for a in kept.values()]
                data = json.dumps({"stored_at": now, "artifacts": index}).encode("utf-8")
                write_sealed(staging / "index", data, self._sealer, _bound(run_id, "index"))
                os.utime(staging / "index", (now, now))  # its age, without opening it
                _touch(staging / "used", now)
                remove_now(self.root / run_id, self.root)  # the same run id again: the newer one wins
                os.rename(staging, self.root / run_id)
        except OSError:
            kept = {}
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if not isinstance(workspace, int):
                os.close(root_fd)
        self._expire()
        return list(kept.values())

    def _sealed_copy(self, root_fd: int, artifact: Artifact, run_id: str, staging: Path) -> bool:
        """Seals one workspace file into `staging`, if it still has the digest and size listed."""
        name = artifact["sha256"]
        if not isinstance(name, str) or not _DIGEST.fullmatch(name):
            return False
        if (staging / name).exists():
            return True  # the same content under another path
        part = staging / (name + ".part")
        digest = hashlib.sha256()
        try:
            parts = safefs.split_relative(artifact["path"])
            with safefs.opened_file(root_fd, parts) as (fd, info), open(part, "xb", opener=private_file) as out:
                if info.st_size != artifact["size"]:
                    return False
                writer = SealingWriter(out, self._sealer, _bound(run_id, name))
                left = info.st_size
                while left > 0 and (chunk := os.read(fd, min(safefs.CHUNK_BYTES, left))):
                    digest.update(chunk)
                    writer.write(chunk)
                    left -= len(chunk)
                writer.close()
            if left or digest.hexdigest() != name:
                return False
            os.rename(part, staging / name)
            return True
        except (OSError, ValueError):
            return False
        finally:
            part.unlink(missing_ok=True)

    # -- owners ------------------------------------------------------------------------------
    def set_owner(self, run_id: str, caller: str | None) -> None:
        """Records who ran `run_id` (until then, nobody lists or reads its artifacts)."""
        if RUN_ID.fullmatch(run_id) and (self.root / run_id).is_dir():
            try:
                write_sealed(self.root / run_id / "owner", (caller or "").encode(), self._sealer,
                             _bound(run_id, "owner"))  # fmt: skip
            except OSError:
                pass  # evicted meanwhile

    def owned_by(self, run_id: str, caller: str | None) -> bool:
        """Whether `caller` ran `run_id` (False for an unknown run, or one whose owner does not open)."""
        if not RUN_ID.fullmatch(run_id):
            return False
        try:
            owner = read_sealed(self.root / run_id / "owner", self._sealer, _bound(run_id, "owner"), _MAX_OWNER_BYTES)
        except (OSError, SealError):
            return False
        return owner == (caller or "").encode()

    def runs_of(self, caller: str) -> list[str]:
        """The runs `caller` ran that the directory keeps, least recently used first."""
        runs = [name for name, _ in _runs_on_disk(self.root) if self.owned_by(name, caller)]
        return runs

    # -- reading ---------------------------------------------------------------------------
    def list(self, run_ids: Iterable[str] | None = None) -> list[StoredArtifact]:
        """The artifacts kept now (of `run_ids` only, if given), most recently used run last."""
        self._expire()
        wanted = set(run_ids) if run_ids is not None else None
        return [artifact for name, _ in _runs_on_disk(self.root) if wanted is None or name in wanted
                for artifact in self._index(name).values()]  # fmt: skip

    def get(self, run_id: str, path: str) -> StoredArtifact:
        """The entry of one kept artifact (marks its run as recently used).

        Raises:
            KeyError: no such run or path is kept (never was, evicted, or its index does not open).
        """
        artifact = self._index(run_id).get(path) if RUN_ID.fullmatch(run_id) else None
        if artifact is None:
            raise KeyError(f"no artifact {path!r} of run {run_id!r} is kept (unknown, or evicted)")
        if artifact.stored_at < self._timer() - self.max_age_s:
            raise KeyError(f"no artifact {path!r} of run {run_id!r} is kept (expired)")
        _touch(self.root / run_id / "used", self._timer())
        return artifact

    def read(self, run_id: str, path: str) -> bytes:
        """The bytes of one kept artifact.

        Raises:
            KeyError: as `get`, also when it is evicted while being read or its sealed file does not open.
        """
        artifact = self.get(run_id, path)
        try:
            with open(self.root / run_id / artifact.sha256, "rb", opener=no_follow) as source:
                reader = OpeningReader(source, self._sealer, _bound(run_id, artifact.sha256))
                data = reader.read_exact(artifact.size)
                if not reader.at_end():
                    raise SealError("more bytes than the index says")
        except (OSError, SealError):
            raise KeyError(f"no artifact {path!r} of run {run_id!r} is kept (evicted, or does not open)") from None
        return data

    def file_path(self, run_id: str, path: str) -> Path:
        """Not offered: the bytes on disk are sealed (read them with `read`)."""
        raise KeyError(f"artifact {path!r} of run {run_id!r} is sealed on the state directory: use read()")

    def forget(self, run_id: str) -> None:
        """Drops every artifact of a run (nothing happens for an unknown run)."""
        if RUN_ID.fullmatch(run_id):
            remove_now(self.root / run_id, self.root)

    def close(self) -> None:
        """Nothing to do: the artifacts stay for every replica (retention removes them)."""

    def _index(self, run_id: str) -> dict[str, StoredArtifact]:
        try:
            data = read_sealed(self.root / run_id / "index", self._sealer, _bound(run_id, "index"), _MAX_INDEX_BYTES)
            index = json.loads(data)
            stored_at = float(index["stored_at"])
            return {str(path): StoredArtifact(run_id, str(path), int(size), str(sha256), str(mime), stored_at)
                    for path, size, sha256, mime in index["artifacts"]}  # fmt: skip
        except (OSError, SealError, ValueError, TypeError, KeyError):
            return {}

    # -- retention -------------------------------------------------------------------------
    def _expire(self) -> None:
        """Drops expired runs, then least recently used ones while over a bound (one process at a time)."""
        try:
            lock = os.open(self.root / ".evict-lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock)
            return  # another process is at it
        try:
            _evict(self.root, self._timer() - self.max_age_s, self.max_artifacts, self.max_bytes)
        finally:
            os.close(lock)


def _runs_on_disk(root: Path) -> list[tuple[str, float]]:
    """(run id, last use) of every run kept, least recently used first."""
    runs = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if RUN_ID.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                    runs.append((entry.name, _mtime(Path(entry.path) / "used")))
    except OSError:
        return []
    return sorted(runs, key=lambda run: run[1])


def _evict(root: Path, oldest: float, max_artifacts: int, max_bytes: int) -> None:
    """Drops runs stored before `oldest`, then least recently used ones while over a bound, and crash leftovers."""
    for entry in os.scandir(root):
        path = Path(entry.path)
        if entry.name.startswith((".new-", ".trash-")) and time.time() - _mtime(path) > _STALE_S:
            shutil.rmtree(path, ignore_errors=True)  # left by a process that died
    sizes: list[tuple[str, int, int]] = []
    for name, _ in _runs_on_disk(root):
        directory = root / name
        if _mtime(directory / "index") < oldest:
            remove_now(directory, root)
            continue
        files = [child for child in directory.iterdir() if _DIGEST.fullmatch(child.name)]
        sizes.append((name, len(files), sum(_size(child) for child in files)))
    count, total = sum(s[1] for s in sizes), sum(s[2] for s in sizes)
    for name, files_kept, size in sizes:  # least recently used first
        if count <= max_artifacts and total <= max_bytes:
            break
        remove_now(root / name, root)
        count, total = count - files_kept, total - size


def _bound(run_id: str, name: str) -> bytes:
    return f"artifacts {run_id}/{name}".encode("ascii")


def _touch(path: Path, when: float) -> None:
    try:
        path.touch(mode=0o600)
        os.utime(path, (when, when), follow_symlinks=False)
    except OSError:
        pass


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0
