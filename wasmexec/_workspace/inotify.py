"""Linux inotify through ctypes: a non-blocking instance, watches, and its events parsed."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys
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

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


class Inotify:
    """One inotify instance (non-blocking, close-on-exec).

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

    def events(self) -> Iterator[tuple[int, int, str]]:
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

    def close(self) -> None:
        """Closes the instance (slow with many watches: the kernel tears them down here)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
