"""Sessions: a workspace that outlives one run and one process, kept sealed on storage that replicas share.

A session is a directory ``<root>/<session_id>/`` (``root`` is ``DIR/sessions`` of the state
directory, which every replica of a server set may share)::

    owner           the caller it belongs to, sealed (a digest, never a raw session id or token)
    used            its mtime is the session's last use (wall clock: shared by every replica)
    lock            flock-ed by the replica that runs the session now, for the length of one run
    gen-N           the committed files: one sealed archive (`wasmexec._state.sealed`); none for N = 0
    gen-N.part-*    a commit being written (left by a replica that died; removed by the next run)
    vault           the session's PII vault, sealed (`wasmexec._tools.pii`): it dies with the session

Everything sealed is bound to the session id and its own name, so no file can be moved to
another session or another generation, and a changed one does not open (the call fails with
a clear error; the server goes on). A run never works on the shared volume: `checkout` opens
the current generation into a private directory on local disk (the run's /workspace); when
the guest finished (it returned, or raised: an uncaught exception is a finished run) `finish`
seals that directory as the next generation (written under a temporary name, then renamed:
the commit point) and removes the old one; when it was stopped (a limit, the deadline, a
cancel, a crash) the copy is dropped, so the files of earlier runs are never lost. Symlinks
are never packed (so never carried from one run to the next) and never followed.

Each run is still a fresh interpreter: only files persist. Two runs of one session never
overlap, on one replica or on several: the `lock` is taken without waiting, and a second run
is refused with a retryable `SessionBusy` (waiting would hold a request open for as long as
the first run takes). A replica that dies mid-run loses its lock with it, so the session is
usable at once from any replica, at its last committed generation. Sessions expire after an
idle TTL (from the last run's end); whichever replica sees it first removes one, after taking
its lock (so never one that a run is using) and checking its last use again. Their number
and total bytes on disk are capped over the shared store, not per process.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmexec._envelope import RunResult
from wasmexec._state.directory import remove_now
from wasmexec._state.key import Sealer, SealError, StateKey
from wasmexec._state.sealed import (
    OpeningReader,
    SealingWriter,
    no_follow,
    pack_tree,
    private_file,
    read_sealed,
    unpack_tree,
    write_sealed,
)
from wasmexec._workspace import safefs
from wasmexec._workspace.artifacts import survey

#: Long enough for a conversation's pauses, short enough that abandoned sessions do not pile up.
DEFAULT_SESSION_TTL_S = 30 * 60.0
#: Sessions the store holds at once (over every replica sharing it); each may hold a full workspace.
DEFAULT_MAX_SESSIONS = 100
#: Bytes all sessions of the store may hold together on disk.
DEFAULT_MAX_SESSION_BYTES = 1024 * 1024 * 1024
#: How often the reaper looks for expired sessions, at most (more often for a short TTL).
REAP_EVERY_S = 60.0
#: A walk of a session's files stops after this many entries (the workspace file limit's ceiling is lower).
MAX_SESSION_ENTRIES = 1_000_000
#: The largest small sealed file of a session (its owner); a vault has its own bound (`MAX_EXTRA_BYTES`).
_MAX_OWNER_BYTES = 1024
#: The largest extra value kept with a session (its PII vault: 100,000 values of a few dozen bytes each).
MAX_EXTRA_BYTES = 64 * 1024 * 1024
#: A half-made session (``.new-*``) or run copy older than this, with nobody holding it, is left over by a crash.
_STALE_S = 60.0
#: Local run copies of every store of this user live in directories with this prefix in the temp dir.
_SCRATCH_PREFIX = "wasmexec-session-runs-"

#: `secrets.token_urlsafe(32)`: 43 characters of the URL-safe base64 alphabet.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")
_GENERATION = re.compile(r"gen-([0-9]{1,18})")
_EXTRA = re.compile(r"[a-z]{1,20}")


class SessionError(Exception):
    """A session cannot be used or made; the message says why and what to do."""

    retryable = False


class UnknownSession(SessionError):
    """The id names no session of this caller (never was, expired, or another client's)."""


class SessionBusy(SessionError):
    """Another run of the session is still going: retry when it has finished."""

    retryable = True


class DamagedSession(SessionError):
    """A sealed file of the session does not open: changed on disk, or sealed under another state key."""


@dataclass
class Session:
    """One session, reserved for one run by this process (it holds the session's `lock`) until `finish`."""

    id: str
    owner: str | None
    """The caller that made it (`wasmexec._server.callers.caller_key`); None: the id alone is the handle."""
    directory: Path
    generation: int = 0
    last_used: float = 0.0
    lock_fd: int = -1
    vault: Any = None
    """What the server keeps with the session for this run (its PII vault, `wasmexec._tools.pii`): loaded
    from the session's sealed `vault` when the run starts, saved back before the run lets go of the lock."""


class SessionStore:
    """The sessions in one directory, which several processes may share (see the module)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        key: StateKey | None = None,
        ttl_s: float = DEFAULT_SESSION_TTL_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        timer: Callable[[], float] = time.time,
        reaper: bool = False,
    ) -> None:
        """
        Args:
            root: the directory that holds one directory per session (made 0700 if missing).
            key: the state key that seals the sessions (the same on every replica); by default a key
                of this process only, so no other process can open its sessions.
            ttl_s: a session unused for this long is removed.
            max_sessions: sessions in the directory at once; making one more is refused.
            max_bytes: bytes of all sessions in the directory together; a run that would pass it keeps
                its files only until the end of that run (its result says so).
            timer: the wall clock of `ttl_s` (injectable for tests; replicas compare its values).
            reaper: also remove expired sessions from a background thread (else only when the store
                is used), so an idle server does not keep their files.
        """
        self.root = Path(root)
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._sealer: Sealer = (key or StateKey.ephemeral()).sealer("sessions")
        self._timer = timer
        self._lock = threading.Lock()
        self._held: set[str] = set()
        """Ids this process has reserved: flock alone may not keep two threads of one process apart (NFS)."""
        self._closed = False
        self._stop = threading.Event()
        self._scratch: Path | None = None
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        _sweep_scratch()
        self.expire()
        if reaper:
            threading.Thread(target=self._reap, name="wasmexec-sessions", daemon=True).start()

    def _reap(self) -> None:
        while not self._stop.wait(min(max(self.ttl_s / 2, 1.0), REAP_EVERY_S)):
            try:
                self.expire()
            except OSError:  # the shared volume is away for a moment: try again later
                pass

    # -- making and finding sessions -----------------------------------------------------------
    def create(self, owner: str | None) -> Session:
        """A new, empty session that `owner` holds, reserved for its first run (see `acquire`).

        Raises:
            SessionError: the store holds as many sessions, or as many bytes, as it may.
        """
        self.expire()
        session_id = secrets.token_urlsafe(32)
        self._reserve(session_id)
        try:
            with _flocked(self.root / ".create-lock"):  # counting and making, one replica at a time
                if len(self) >= self.max_sessions:
                    raise SessionError(f"this server already holds {self.max_sessions} sessions (its limit); "
                                       "reuse a session_id, or wait until idle sessions expire")  # fmt: skip
                if self._bytes() >= self.max_bytes:
                    raise SessionError("the sessions on this server hold all the bytes it allows; "
                                       "reuse a session_id, or wait until idle sessions expire")  # fmt: skip
                return self._made(session_id, owner)
        except BaseException:
            self._unreserve(session_id)
            raise

    def _made(self, session_id: str, owner: str | None) -> Session:
        """Makes the session's directory under a temporary name, then renames it into place (never half-made)."""
        staging = self.root / f".new-{session_id}"
        lock_fd = -1
        try:
            staging.mkdir(mode=0o700)
            lock_fd = _hold(staging / "lock", create=True)
            write_sealed(staging / "owner", (owner or "").encode(), self._sealer, _bound(session_id, "owner"))
            now = self._timer()
            (staging / "used").touch(mode=0o600)
            os.utime(staging / "used", (now, now))
            os.rename(staging, self.root / session_id)
        except OSError as exc:  # a full or read-only disk: the call fails, the server goes on
            if lock_fd >= 0:
                os.close(lock_fd)
            shutil.rmtree(staging, ignore_errors=True)
            raise SessionError(f"cannot make a session on this server: {exc.strerror or exc}") from None
        return Session(session_id, owner, self.root / session_id, last_used=now, lock_fd=lock_fd)

    def acquire(self, session_id: str, owner: str | None) -> Session:
        """The session `session_id`, reserved for one run until `finish` (found on disk, made by any replica).

        Raises:
            UnknownSession: not a session of this caller (never was, expired, or another client's).
            SessionBusy: another run of it is going on (here or on another replica).
            DamagedSession: its sealed files do not open (changed on disk, or another state key).
        """
        if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
            raise _unknown(self.ttl_s)
        directory = self.root / session_id
        if self._owner(directory) != (owner or ""):
            # One answer for all three, so an id cannot be probed: another client's session looks unknown.
            raise _unknown(self.ttl_s)
        self._reserve(session_id)
        try:
            lock_fd = _hold(directory / "lock")
        except FileNotFoundError:
            self._unreserve(session_id)
            raise _unknown(self.ttl_s) from None
        except OSError:
            self._unreserve(session_id)
            raise _busy() from None
        try:
            last_used = _last_use(directory)
            if not _same_file(lock_fd, directory / "lock") or last_used < self._timer() - self.ttl_s:
                remove_now(directory, self.root)  # expired while nobody held it (or removed meanwhile)
                raise _unknown(self.ttl_s)
            generation = _tidy(directory)
            session = Session(session_id, owner, directory, generation, last_used, lock_fd)
        except BaseException:
            os.close(lock_fd)
            self._unreserve(session_id)
            raise
        return session

    def _owner(self, directory: Path) -> str | None:
        try:
            data = read_sealed(directory / "owner", self._sealer, _bound(directory.name, "owner"), _MAX_OWNER_BYTES)
        except FileNotFoundError:
            return None
        except SealError:
            raise _damaged("owner") from None
        except OSError:
            return None
        return data.decode("ascii", "replace")

    def _reserve(self, session_id: str) -> None:
        with self._lock:
            if self._closed:
                raise SessionError("this server is shutting down")
            if session_id in self._held:
                raise _busy()
            self._held.add(session_id)

    def _unreserve(self, session_id: str) -> None:
        with self._lock:
            self._held.discard(session_id)

    # -- one run -------------------------------------------------------------------------------
    def checkout(self, session: Session) -> Path:
        """A private copy of the session's current files on local disk, for one run (its /workspace).

        Raises:
            DamagedSession: the current generation does not open.
            OSError: the local disk is full.
        """
        target = Path(tempfile.mkdtemp(prefix="run-", dir=self._scratch_dir()))
        if session.generation == 0:
            return target
        name = f"gen-{session.generation}"
        target_fd = safefs.open_root(target)
        try:
            with open(session.directory / name, "rb", opener=no_follow) as source:
                reader = OpeningReader(source, self._sealer, _bound(session.id, name))
                unpack_tree(reader, target_fd, MAX_SESSION_ENTRIES, self.max_bytes)
        except BaseException as exc:
            shutil.rmtree(target, ignore_errors=True)
            if isinstance(exc, SealError):
                raise _damaged("files") from None
            raise
        finally:
            os.close(target_fd)
        return target

    def read_extra(self, session: Session, name: str) -> bytes | None:
        """The sealed value `name` kept with the session (None when there is none yet).

        Raises:
            DamagedSession: it does not open.
        """
        assert _EXTRA.fullmatch(name)
        try:
            return read_sealed(session.directory / name, self._sealer, _bound(session.id, name), MAX_EXTRA_BYTES)
        except FileNotFoundError:
            return None
        except SealError:
            raise _damaged(name) from None

    def write_extra(self, session: Session, name: str, data: bytes) -> None:
        """Keeps `data` sealed with the session as `name` (call it while the session is reserved)."""
        assert _EXTRA.fullmatch(name) and session.lock_fd >= 0
        write_sealed(session.directory / name, data, self._sealer, _bound(session.id, name))

    def finish(self, session: Session, workspace: Path | None, *, keep: bool, end: bool = False) -> str | None:
        """Ends a run: its copy becomes the session's files if `keep`, else it is dropped; frees the session.

        `workspace` is the run's copy (None if it was never made). With `end` the session ends
        too: its files, vault and slot are gone at once. Returns a warning when the files could
        not be kept (the sessions' byte cap), else None.
        """
        warning = None
        try:
            if end:
                remove_now(session.directory, self.root)
            else:
                if keep and workspace is not None:
                    warning = self._commit(session, workspace)
                now = self._timer()
                try:  # the idle time, shared with every replica
                    os.utime(session.directory / "used", (now, now), follow_symlinks=False)
                except OSError:
                    pass
                session.last_used = now
        finally:
            if workspace is not None:
                shutil.rmtree(workspace, ignore_errors=True)
            _let_go(session)
            self._unreserve(session.id)
        return warning

    def _commit(self, session: Session, workspace: Path) -> str | None:
        fd = safefs.open_root(workspace)
        try:
            size = survey(fd, MAX_SESSION_ENTRIES).bytes
            others = self._bytes(but=session.id)
            if others + size > self.max_bytes:
                return (f"the files of this run were not kept in the session: the sessions on this server may hold "
                        f"{self.max_bytes} bytes together, and this session would take {size}")  # fmt: skip
            new = session.generation + 1
            part = session.directory / f"gen-{new}.part-{secrets.token_hex(4)}"
            try:
                with open(part, "xb", opener=private_file) as out:
                    writer = SealingWriter(out, self._sealer, _bound(session.id, f"gen-{new}"))
                    pack_tree(fd, writer, MAX_SESSION_ENTRIES)
                    writer.close()
                    out.flush()
                    os.fsync(out.fileno())  # durable before it becomes the session's files
                os.rename(part, session.directory / f"gen-{new}")  # the commit point
            except OverflowError:
                part.unlink(missing_ok=True)
                return (f"the files of this run were not kept in the session: it holds more than "
                        f"{MAX_SESSION_ENTRIES} entries")  # fmt: skip
            except BaseException:
                part.unlink(missing_ok=True)
                raise
        finally:
            os.close(fd)
        (session.directory / f"gen-{session.generation}").unlink(missing_ok=True)
        session.generation = new
        return None

    # -- ending sessions -----------------------------------------------------------------------
    def end(self, session_id: str, owner: str | None) -> bool:
        """Ends `owner`'s session `session_id` now (files, vault and slot); False if there is none to end.

        Ending is idempotent: an unknown, expired, already ended or another caller's session is
        not an error (the same answer for each, so an id cannot be probed).

        Raises:
            SessionBusy: a run of it is going on.
        """
        try:
            session = self.acquire(session_id, owner)
        except UnknownSession:
            return False
        self.finish(session, None, keep=False, end=True)
        return True

    def expire(self) -> None:
        """Removes the sessions unused for longer than the TTL, and what crashed processes left.

        Never one a run is using (here or on another replica): its lock is taken first, without
        waiting, and its last use read again under the lock.
        """
        oldest = self._timer() - self.ttl_s
        for entry in _entries(self.root):
            directory = Path(entry.path)
            if entry.name.startswith(".trash-"):
                shutil.rmtree(directory, ignore_errors=True)  # a removal another process did not finish
                continue
            stale = entry.name.startswith(".new-") and _age(directory) > _STALE_S
            if not (stale or (_SESSION_ID.fullmatch(entry.name) and _last_use(directory) < oldest)):
                continue
            with self._lock:
                if entry.name in self._held:
                    continue
            try:
                fd = _hold(directory / "lock")
            except FileNotFoundError:
                remove_now(directory, self.root)  # half-made, never used
                continue
            except OSError:
                continue  # in use by a run somewhere
            try:
                if stale or _last_use(directory) < self._timer() - self.ttl_s:
                    remove_now(directory, self.root)
            finally:
                os.close(fd)

    def close(self) -> None:
        """Stops the reaper and refuses new runs; the sessions stay for any replica. Idempotent."""
        self._stop.set()
        with self._lock:
            self._closed = True

    def __len__(self) -> int:
        """Sessions in the directory now (made by any process)."""
        return sum(1 for entry in _entries(self.root) if _SESSION_ID.fullmatch(entry.name))

    def _bytes(self, but: str | None = None) -> int:
        """Bytes the sessions' files take on disk (of all but `but`)."""
        total = 0
        for entry in _entries(self.root):
            if _SESSION_ID.fullmatch(entry.name) and entry.name != but:
                total += sum(child.stat(follow_symlinks=False).st_size for child in _entries(Path(entry.path)))
        return total

    def _scratch_dir(self) -> Path:
        """This process's private directory for run copies (local disk; removed at exit, or by the next start)."""
        with self._lock:
            if self._scratch is None:
                self._scratch = _new_scratch()
            return self._scratch


def _unknown(ttl_s: float) -> UnknownSession:
    return UnknownSession("unknown or expired session_id (sessions end after "
                          f"{ttl_s / 60:g} minutes unused, and belong to the client that "
                          "started them); start a new one with session: true")  # fmt: skip


def _busy() -> SessionBusy:
    return SessionBusy("this session is busy with another run_python call; its runs never overlap: "
                       "retry when that call has returned")  # fmt: skip


def _damaged(what: str) -> DamagedSession:
    return DamagedSession(f"this session's stored {what} cannot be opened: changed on disk, or sealed under "
                          "another state key (every replica needs the same --state-key-file); start a new "
                          "session with session: true")  # fmt: skip


def _bound(session_id: str, name: str) -> bytes:
    """What a sealed file of a session is bound to: its session and its name there."""
    return f"session {session_id}/{name}".encode("ascii")


def _hold(path: Path, *, create: bool = False) -> int:
    """Opens and flock-s `path` without waiting; raises BlockingIOError when another holds it."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _flocked(path: Path) -> Iterator[None]:
    """A short critical section over every process sharing the directory (waits for the lock)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _same_file(fd: int, path: Path) -> bool:
    """Whether `fd` is still the file at `path` (a session removed while we opened its lock is gone)."""
    try:
        held, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def _last_use(directory: Path) -> float:
    """When the session was last used (its `used` file's mtime; the directory's if that is missing)."""
    for path in (directory / "used", directory):
        try:
            return os.lstat(path).st_mtime
        except OSError:
            continue
    return 0.0


def _age(path: Path) -> float:
    try:
        return time.time() - os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _tidy(directory: Path) -> int:
    """The current generation's number; removes older generations and half-written ones (under the lock)."""
    generations = {}
    for child in _entries(directory):
        match = _GENERATION.fullmatch(child.name)
        if match is not None:
            generations[int(match[1])] = Path(child.path)
        elif child.name.startswith("gen-") or child.name.startswith("."):  # a commit or a write cut short
            Path(child.path).unlink(missing_ok=True)
    current = max(generations, default=0)
    for number, path in generations.items():
        if number != current:  # a commit that died between its rename and removing the old one
            path.unlink(missing_ok=True)
    return current


def _let_go(session: Session) -> None:
    """Releases the session's flock (closing the descriptor), so any replica may run it."""
    if session.lock_fd >= 0:
        os.close(session.lock_fd)
        session.lock_fd = -1


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return [
                entry
                for entry in entries
                if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)
            ]
    except OSError:
        return []


def _new_scratch() -> Path:
    """A private (0700) directory in the temp dir, flock-ed for this process's life, removed at exit."""
    scratch = Path(tempfile.mkdtemp(prefix=_SCRATCH_PREFIX))
    _hold(scratch / ".held", create=True)  # kept open: the lock dies with the process
    atexit.register(shutil.rmtree, scratch, True)
    return scratch


def _sweep_scratch() -> None:
    """Removes the run copies that processes killed mid-run left (their `.held` lock is free)."""
    base = Path(tempfile.gettempdir())
    for entry in _entries(base):
        if not entry.name.startswith(_SCRATCH_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid != os.getuid():
                continue
            fd = _hold(Path(entry.path) / ".held")
        except OSError:
            continue  # a live process's, another user's, or one being made right now
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
        finally:
            os.close(fd)


#: Diagnostics that mean the host stopped the guest (a limit, the deadline, a cancel, a crash).
_STOPPED = frozenset({"SANDBOX_LIMIT", "SANDBOX_TRAP", "SANDBOX_BUSY", "BLOCKING_WAIT", "INTERNAL_ERROR"})


def guest_finished(result: RunResult) -> bool:
    """Whether the guest ran to its end: it returned, or raised (its files are then kept in a session).

    A run the host stopped (any limit, the deadline, a cancel, a trap) did not finish: what it
    wrote may be half-written, so a session keeps the files it had before. A guest can only
    make its own run look stopped (by reporting such a diagnostic), never a stopped run finished.
    """
    return not any(diagnostic["code"] in _STOPPED for diagnostic in result["diagnostics"])
