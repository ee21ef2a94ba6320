"""Linux inotify through ctypes: one instance for the whole process, shared by every run's quota.

An inotify instance is a scarce per-user resource (``fs.inotify.max_user_instances``, often
128) and closing one waits for the kernel (milliseconds): a busy server that held one per run
sat at the user's whole limit. So the process opens one (`subscribe`), never closes it, and each
run's quota holds a `Subscription`: the watches it added, removed when it closes. Whoever checks
first reads the queued events and files each under the subscriptions that watch its directory
(by watch descriptor; two runs watching one directory share its descriptor and both get its
events). A queue overflow, shared or of one subscription, tells every subscription concerned
to rescan. Thread-safe: runs check concurrently from their epoch callbacks.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
from collections.abc import Iterator
from typing import Any

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

#: What changes the bytes or entries of a directory's children, or the directory itself.
WATCH_MASK = (
    IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
    | IN_ONLYDIR
)  # fmt: skip
_HEADER = struct.Struct("iIII")
_READ_BYTES = 64 * 1024
#: Events kept for one subscription between two of its checks; past this it rescans instead (bounded memory).
MAX_PENDING_EVENTS = 16_384

Event = tuple[int, int, str]
"""(watch descriptor, mask, name)."""

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        # The process's own symbols, libc's among them: `ctypes.util.find_library("c")` runs
        # `ldconfig -p` in a subprocess, which cost every `wasmexec run` a fork and an exec.
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


class Inotify:
    """One inotify instance (non-blocking, close-on-exec), never closed: the process shares it (`subscribe`).

    Raises:
        OSError: inotify is missing (not Linux) or the per-user instance limit is reached (EMFILE).
    """

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise OSError(38, "inotify exists only on Linux")
        fd = _lib().inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
        self.fd: int = fd

    def watch_fd(self, dir_fd: int) -> int:
        """Watches the directory open as `dir_fd` (by its inode, not a path); returns the watch descriptor.

        Raises:
            OSError: ENOSPC when the per-user watch limit is reached.
        """
        wd = _lib().inotify_add_watch(self.fd, f"/proc/self/fd/{dir_fd}".encode(), WATCH_MASK)
        if wd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
        return int(wd)

    def remove_watch(self, wd: int) -> None:
        """Removes a watch (already gone with its directory: nothing to do)."""
        _lib().inotify_rm_watch(self.fd, wd)

    def events(self) -> Iterator[Event]:
        """The queued events as (watch descriptor, mask, name), until the queue is empty."""
        while True:
            try:
                data = os.read(self.fd, _READ_BYTES)
            except BlockingIOError:
                return
            offset = 0
            while offset + _HEADER.size <= len(data):
                wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                raw = data[offset + _HEADER.size : offset + _HEADER.size + length]
                offset += _HEADER.size + length
                yield wd, mask, os.fsdecode(raw.split(b"\0", 1)[0])


class Subscription:
    """One run's share of the process's instance: its watches and the events they got. See the module."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._wds: set[int] = set()
        self._pending: list[Event] = []
        self._overflowed = False
        self._closed = False

    def watch_fd(self, dir_fd: int) -> int:
        """Watches the directory open as `dir_fd`; returns the watch descriptor.

        Raises:
            OSError: ENOSPC when the per-user watch limit is reached; EBADF after `close`.
        """
        with self._shared.lock:
            if self._closed:
                raise OSError(9, "the subscription is closed")
            wd = self._shared.instance.watch_fd(dir_fd)
            if wd not in self._wds:  # registered before the lock is let go: no event can miss it
                self._wds.add(wd)
                self._shared.owners.setdefault(wd, []).append(self)
            return wd

    def events(self) -> list[Event]:
        """The events of this subscription's watches since the last call; an overflow is ``(-1, IN_Q_OVERFLOW, "")``."""
        with self._shared.lock:
            self._shared.drain()
            events, self._pending = self._pending, []
            if self._overflowed:
                self._overflowed = False
                events.append((-1, IN_Q_OVERFLOW, ""))
            return events

    def close(self) -> None:
        """Removes this subscription's watches (never the shared instance). Idempotent."""
        with self._shared.lock:
            if self._closed:
                return
            self._closed = True
            for wd in self._wds:
                owners = self._shared.owners.get(wd)
                if owners is None:
                    continue  # the kernel dropped it already (IN_IGNORED: the directory is gone)
                owners.remove(self)
                if not owners:
                    del self._shared.owners[wd]
                    self._shared.instance.remove_watch(wd)
            self._wds.clear()
            self._pending = []

    def _deliver(self, event: Event) -> None:
        if self._overflowed:
            return  # a rescan is coming: the events in between tell nothing more
        if len(self._pending) >= MAX_PENDING_EVENTS:
            self._overflowed = True
            self._pending = []
        else:
            self._pending.append(event)


class _Shared:
    """The process's one inotify instance and who watches what (everything under `lock`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._instance: Inotify | None = None
        self.owners: dict[int, list[Subscription]] = {}

    @property
    def instance(self) -> Inotify:
        """The instance, opened on first use (under `lock`); OSError when inotify cannot be had."""
        if self._instance is None:
            self._instance = Inotify()
        return self._instance

    def drain(self) -> None:
        """Reads every queued event and files it under the subscriptions watching its directory (under `lock`)."""
        for event in self.instance.events():
            wd, mask, _ = event
            if mask & IN_Q_OVERFLOW:  # the shared queue lost events: every subscription rescans
                for owners in self.owners.values():
                    for owner in owners:
                        owner._overflowed, owner._pending = True, []
                continue
            watching = self.owners.get(wd)
            if watching is None:
                continue  # a watch removed since (its IN_IGNORED, or late events of a closed run)
            if mask & IN_IGNORED:  # the directory is gone and its watch with it
                del self.owners[wd]
                for owner in watching:
                    owner._wds.discard(wd)
            for owner in watching:
                owner._deliver(event)


_SHARED = _Shared()


def subscribe() -> Subscription:
    """A new subscription to the process's instance (opened on first use, then never closed).

    Raises:
        OSError: inotify cannot be had (not Linux, or the user's instance limit is reached: tried again
            on the next call).
    """
    with _SHARED.lock:
        _ = _SHARED.instance
    return Subscription(_SHARED)
