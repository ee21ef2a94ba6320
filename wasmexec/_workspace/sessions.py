"""Sessions: a workspace that outlives one run, kept in generations so a failed run never loses files.

A session is a directory ``<root>/<session_id>/``::

    gen-N/        the committed files (what the next run starts from)
    current       a symlink to gen-N, swapped by rename (atomic)
    run-<id>/     a run's private copy of gen-N: the run works here
    owner         the caller it belongs to (a digest, never a raw session id or token)
    lock          flock-ed while a server process holds the session

A run works in a copy of the current generation. When the guest finished (it returned, or
raised: an uncaught exception is a finished run), the copy becomes the next generation and
the old one is removed; when it was stopped (a limit, the deadline, a cancel, a crash), the
copy is dropped, so the files of earlier runs are never lost. Symlinks are not carried from
one run to the next (the host never follows one; the guest cannot make one that escapes).

Each run is still a fresh interpreter: only files persist. Two runs of one session never
overlap: the second is refused with a retryable `SessionBusy` (waiting would hold a
request open for as long as the first run takes). Sessions expire after an idle TTL (from
the last run's end), and their number and total bytes are capped. They outlive the server
process: a store starting on the directory takes over every session no live process
holds (its `lock` is free), keeps its current generation and removes its stale ``run-*``
copies; an expired or broken one is removed. Several servers may share the directory.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasmexec._envelope import RunResult
from wasmexec._workspace import safefs
from wasmexec._workspace.artifacts import survey

#: Long enough for a conversation's pauses, short enough that abandoned sessions do not pile up.
DEFAULT_SESSION_TTL_S = 30 * 60.0
#: Sessions one server keeps at once; each may hold a full workspace.
DEFAULT_MAX_SESSIONS = 100
#: Bytes all sessions of one server may hold together.
DEFAULT_MAX_SESSION_BYTES = 1024 * 1024 * 1024
#: How often the reaper looks for expired sessions, at most (more often for a short TTL).
REAP_EVERY_S = 60.0
#: A walk of a session's files stops after this many entries (the workspace file limit's ceiling is lower).
MAX_SESSION_ENTRIES = 1_000_000

#: `secrets.token_urlsafe(32)`: 43 characters of the URL-safe base64 alphabet.
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")
_GENERATION = re.compile(r"gen-([0-9]{1,18})")
#: What `wasmexec._server.callers.caller_key` returns (None is stored as an empty file).
_OWNER = re.compile(r"stdio|[a-z-]{1,20}:[0-9a-f]{32}")


class SessionError(Exception):
    """A session cannot be used or made; the message says why and what to do."""

    retryable = False


class UnknownSession(SessionError):
    """The id names no session of this caller (never was, expired, or another client's)."""


class SessionBusy(SessionError):
    """Another run of the session is still going: retry when it has finished."""

    retryable = True


@dataclass
class Session:
    """One session: its directory, owner and state (guarded by the store's lock, except `busy`)."""

    id: str
    owner: str | None
    """The caller that made it (`wasmexec._server.callers.caller_key`); None: the id alone is the handle."""
    directory: Path
    generation: int = 0
    last_used: float = 0.0
    bytes: int = 0
    busy: threading.Lock = field(default_factory=threading.Lock)
    lock_fd: int = -1
    vault: Any = None
    """What the server keeps with the session in memory (its PII vault, `wasmexec._tools.pii`): it lives
    exactly as long as the session (set while the session is reserved for a run; never on disk)."""


class SessionStore:
    """The sessions of one server process (see the module)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        ttl_s: float = DEFAULT_SESSION_TTL_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_bytes: int = DEFAULT_MAX_SESSION_BYTES,
        timer: Callable[[], float] = time.monotonic,
        reaper: bool = False,
    ) -> None:
        """
        Args:
            root: the directory that holds one directory per session (made 0700 if missing).
            ttl_s: a session unused for this long is removed.
            max_sessions: sessions at once; making one more is refused.
            max_bytes: bytes of all sessions together; a run that would pass it keeps its files only
                until the end of that run (its result says so).
            timer: the clock of `ttl_s` (injectable for tests).
            reaper: also remove expired sessions from a background thread (else only when the store
                is used), so an idle server does not keep their files.
        """
        self.root = Path(root)
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._timer = timer
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._closed = False
        self._stop = threading.Event()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._take_over()
        if reaper:
            threading.Thread(target=self._reap, name="wasmexec-sessions", daemon=True).start()

    def _reap(self) -> None:
        while not self._stop.wait(min(max(self.ttl_s / 2, 1.0), REAP_EVERY_S)):
            self.expire()

    # -- making and finding sessions -----------------------------------------------------------
    def create(self, owner: str | None) -> Session:
        """A new, empty session that `owner` holds, reserved for its first run (see `acquire`).

        Raises:
            SessionError: the server holds as many sessions, or as many bytes, as it may.
        """
        self.expire()
        with self._lock:
            if self._closed:
                raise SessionError("this server is shutting down")
            if len(self._sessions) >= self.max_sessions:
                raise SessionError(f"this server already holds {self.max_sessions} sessions (its limit); "
                                   "reuse a session_id, or wait until idle sessions expire")  # fmt: skip
            if sum(s.bytes for s in self._sessions.values()) >= self.max_bytes:
                raise SessionError("the sessions on this server hold all the bytes it allows; "
                                   "reuse a session_id, or wait until idle sessions expire")  # fmt: skip
            session_id = secrets.token_urlsafe(32)
            session = Session(session_id, owner, self.root / session_id, last_used=self._timer())
            try:
                session.directory.mkdir(mode=0o700)
                session.lock_fd = _hold(session.directory / "lock")
                (session.directory / "owner").write_text(owner or "")
                (session.directory / "gen-0").mkdir(mode=0o700)
                os.symlink("gen-0", session.directory / "current")
            except OSError as exc:  # a full or read-only disk: the call fails, the server goes on
                _remove(session)
                raise SessionError(f"cannot make a session on this server: {exc.strerror or exc}") from None
            session.busy.acquire()
            self._sessions[session_id] = session
        return session

    def acquire(self, session_id: str, owner: str | None) -> Session:
        """The session `session_id`, reserved for one run until `finish`.

        Raises:
            UnknownSession: not a session of this caller (never was, expired, or another client's).
            SessionBusy: another run of it is going on.
        """
        self.expire()
        with self._lock:
            session = self._sessions.get(session_id) if _SESSION_ID.fullmatch(session_id) else None
            if session is None or session.owner != owner:
                # One answer for all three, so an id cannot be probed: another client's session looks unknown.
                raise UnknownSession("unknown or expired session_id (sessions end after "
                                   f"{self.ttl_s / 60:g} minutes unused, and belong to the client that "
                                   "started them); start a new one with session: true")  # fmt: skip
            if not session.busy.acquire(blocking=False):
                raise SessionBusy("this session is busy with another run_python call; its runs never overlap: "
                                  "retry when that call has returned")  # fmt: skip
            session.last_used = self._timer()
        return session

    # -- one run -------------------------------------------------------------------------------
    def checkout(self, session: Session) -> Path:
        """A private copy of the session's current files for one run (the run's /workspace)."""
        target = session.directory / f"run-{secrets.token_hex(8)}"
        target.mkdir(mode=0o700)
        source = session.directory / f"gen-{session.generation}"
        source_fd = safefs.open_root(source)
        target_fd = safefs.open_root(target)
        try:
            safefs.copy_tree(source_fd, target_fd, MAX_SESSION_ENTRIES)
        finally:
            os.close(source_fd)
            os.close(target_fd)
        return target

    def finish(self, session: Session, workspace: Path | None, *, keep: bool, end: bool = False) -> str | None:
        """Ends a run: its copy becomes the session's files if `keep`, else it is dropped; frees the session.

        `workspace` is the run's copy (None if it was never made). With `end` the session ends
        too: its files, vault and slot are gone at once. Returns a warning when the files could
        not be kept (the sessions' byte cap), else None.
        """
        if end:
            with self._lock:
                self._sessions.pop(session.id, None)
            if workspace is not None:
                shutil.rmtree(workspace, ignore_errors=True)
            _remove(session)
            session.busy.release()
            return None
        warning = None
        try:
            if keep and workspace is not None:
                warning = self._commit(session, workspace)
            if workspace is not None and workspace.exists():
                shutil.rmtree(workspace, ignore_errors=True)
        finally:
            with self._lock:
                session.last_used = self._timer()
            try:  # the idle time on disk, for a server that takes the session over
                os.utime(session.directory / "current", follow_symlinks=False)
            except OSError:
                pass
            session.busy.release()
        return warning

    def _commit(self, session: Session, workspace: Path) -> str | None:
        _remove_symlinks(workspace)
        fd = safefs.open_root(workspace)
        try:
            size = survey(fd, MAX_SESSION_ENTRIES).bytes
        finally:
            os.close(fd)
        with self._lock:
            others = sum(s.bytes for s in self._sessions.values() if s is not session)
        if others + size > self.max_bytes:
            return (f"the files of this run were not kept in the session: the sessions on this server may hold "
                    f"{self.max_bytes} bytes together, and this session would take {size}")  # fmt: skip
        old, new = session.generation, session.generation + 1
        os.rename(workspace, session.directory / f"gen-{new}")
        swap = session.directory / "current.new"
        swap.unlink(missing_ok=True)
        os.symlink(f"gen-{new}", swap)
        os.replace(swap, session.directory / "current")
        with self._lock:
            session.generation, session.bytes = new, size
        shutil.rmtree(session.directory / f"gen-{old}", ignore_errors=True)
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
        """Removes the sessions unused for longer than the TTL (never one in the middle of a run)."""
        oldest = self._timer() - self.ttl_s
        with self._lock:
            idle = [s for s in self._sessions.values() if s.last_used < oldest and s.busy.acquire(blocking=False)]
            for session in idle:
                del self._sessions[session.id]
        for session in idle:
            _remove(session)

    def close(self) -> None:
        """Lets go of the sessions (their files stay for the next server to take over). Idempotent."""
        self._stop.set()
        with self._lock:
            self._closed = True
            sessions = [s for s in self._sessions.values() if s.busy.acquire(blocking=False)]
            for session in sessions:
                del self._sessions[session.id]
        for session in sessions:
            _let_go(session)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _take_over(self) -> None:
        """Takes over the sessions no live process holds (see the module); removes expired or broken ones."""
        for entry in os.scandir(self.root):
            if not (_SESSION_ID.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False)):
                continue
            try:
                fd = _hold(Path(entry.path) / "lock")
            except OSError:
                continue  # a live server's session (BlockingIOError), or not ours to touch
            session = self._adopted(Path(entry.path), fd)
            if session is None:
                shutil.rmtree(entry.path, ignore_errors=True)
                os.close(fd)
            else:
                self._sessions[session.id] = session

    def _adopted(self, directory: Path, lock_fd: int) -> Session | None:
        """The session in `directory` cleaned up to its current generation; None if expired, broken or over a cap."""
        try:
            generation = _GENERATION.fullmatch(os.readlink(directory / "current"))
            idle = time.time() - os.lstat(directory / "current").st_mtime
            owner = (directory / "owner").read_text(encoding="ascii")[:100]
        except (OSError, UnicodeDecodeError):
            return None
        fits = len(self._sessions) < self.max_sessions and idle <= self.ttl_s
        if generation is None or not fits or not (owner == "" or _OWNER.fullmatch(owner)):
            return None
        keep = {"lock", "owner", "current", generation[0]}
        for child in os.scandir(directory):
            if child.name not in keep:  # stale run copies, an old generation, a half-made swap
                _remove_path(Path(child.path))
        fd = safefs.open_root(directory / generation[0])
        try:
            size = survey(fd, MAX_SESSION_ENTRIES).bytes
        finally:
            os.close(fd)
        last_used = self._timer() - max(idle, 0.0)
        return Session(directory.name, owner or None, directory, int(generation[1]), last_used, size, lock_fd=lock_fd)


def _hold(path: Path) -> int:
    """Opens and flock-s `path` (made if missing); raises BlockingIOError when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove(session: Session) -> None:
    shutil.rmtree(session.directory, ignore_errors=True)  # rmtree never follows symlinks (fd-based on Linux)
    _let_go(session)


def _let_go(session: Session) -> None:
    """Releases the session's flock (closing the descriptor), so another server may take it over."""
    if session.lock_fd >= 0:
        os.close(session.lock_fd)
        session.lock_fd = -1


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_symlinks(workspace: Path) -> None:
    """Symlinks are not carried to the next run (the guest's own run can still use them)."""
    fd = safefs.open_root(workspace)
    try:
        links = [path for path, info in safefs.walk(fd, MAX_SESSION_ENTRIES) if stat.S_ISLNK(info.st_mode)]
        for path in links:
            try:
                with safefs.opened_dir(fd, path[:-1]) as parent:
                    os.unlink(path[-1], dir_fd=parent)
            except OSError:
                pass
    finally:
        os.close(fd)


#: Diagnostics that mean the host stopped the guest (a limit, the deadline, a cancel, a crash).
_STOPPED = frozenset({"SANDBOX_LIMIT", "SANDBOX_TRAP", "BLOCKING_WAIT", "INTERNAL_ERROR"})


def guest_finished(result: RunResult) -> bool:
    """Whether the guest ran to its end: it returned, or raised (its files are then kept in a session).

    A run the host stopped (any limit, the deadline, a cancel, a trap) did not finish: what it
    wrote may be half-written, so a session keeps the files it had before. A guest can only
    make its own run look stopped (by reporting such a diagnostic), never a stopped run finished.
    """
    return not any(diagnostic["code"] in _STOPPED for diagnostic in result["diagnostics"])
