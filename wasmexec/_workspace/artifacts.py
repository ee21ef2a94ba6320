"""What a run left in its workspace: the files it created or changed, hashed and typed.

A snapshot taken before the run (after the inputs were copied in) and a walk after it
are compared by ``(inode, size, mtime_ns, ctime_ns)``: the guest can set mtime
(``os.utime``) but not ctime, so a change always shows. Symlinks are never artifacts
and never followed (they are counted and reported); a file with several hard links is
listed once. Hashing reads through `safefs` and stops at the size the walk saw.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any

from wasmexec._envelope import Artifact
from wasmexec._workspace import safefs

#: Files with one of these MIME types are typed so only when their first bytes agree
#: (guest file names are untrusted: ``evil.png`` may hold anything).
_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_UNKNOWN_TYPE = "application/octet-stream"
#: Types of data work that Python's table lacks before 3.13.
_MISSING_BEFORE_PY313 = (("text/markdown", ".md"), ("image/webp", ".webp"))

Signature = tuple[int, int, int, int]
"""(inode, size, mtime_ns, ctime_ns) of a regular file."""


def signature(info: os.stat_result) -> Signature:
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


@dataclass
class Usage:
    """What a walk of a workspace found."""

    files: dict[tuple[str, ...], Signature]
    """Regular files by path."""
    entries: int
    """Files, directories and symlinks (the `workspace_files` count)."""
    bytes: int
    """Sum of `safefs.charge` over distinct inodes (the `workspace_bytes` count)."""
    symlinks: int
    over_cap: bool
    """The walk stopped at its entry cap: `entries` is a lower bound."""


def survey(root_fd: int, max_entries: int) -> Usage:
    """Walks a workspace (at most `max_entries + 1` entries) and sums what it holds."""
    files: dict[tuple[str, ...], Signature] = {}
    inodes: set[tuple[int, int]] = set()
    entries = total = symlinks = 0
    for path, info in safefs.walk(root_fd, max_entries):
        entries += 1
        if stat.S_ISLNK(info.st_mode):
            symlinks += 1
        elif stat.S_ISREG(info.st_mode):
            files[path] = signature(info)
        key = (info.st_dev, info.st_ino)
        if key not in inodes:
            inodes.add(key)
            total += safefs.charge(info)
    return Usage(files, entries, total, symlinks, entries > max_entries)


def changed(before: dict[tuple[str, ...], Signature], after: Usage) -> list[tuple[str, ...]]:
    """Paths of regular files that are new or differ from `before`, sorted; one path per inode.

    A name that is not UTF-8 (possible only in a workspace the host filled) cannot be named in
    the JSON result and is left out.
    """
    seen: set[int] = set()
    paths = []
    for path in sorted(after.files):
        sig = after.files[path]
        if before.get(path) != sig and sig[0] not in seen and _is_utf8(path):
            seen.add(sig[0])
            paths.append(path)
    return paths


def _is_utf8(path: tuple[str, ...]) -> bool:
    try:
        "/".join(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def describe(root_fd: int, path: tuple[str, ...], expected: Signature) -> Artifact | None:
    """The artifact entry of one file (size, sha256, MIME type); None if it changed since the walk."""
    digest = hashlib.sha256()
    head = b""
    try:
        with safefs.opened_file(root_fd, path) as (fd, info):
            if signature(info) != expected:
                return None
            left = info.st_size
            while left > 0 and (chunk := os.read(fd, min(safefs.CHUNK_BYTES, left))):
                if not head:
                    head = chunk[:16]
                digest.update(chunk)
                left -= len(chunk)
    except OSError:
        return None
    name = "/".join(path)
    return {"path": name, "size": expected[1], "sha256": digest.hexdigest(), "mime_type": mime_type(name, head)}


def mime_type(name: str, head: bytes) -> str:
    """The MIME type by file name from Python's built-in table; images only when their magic bytes agree."""
    guessed = _types().guess_type(name, strict=False)[0] or _UNKNOWN_TYPE
    magic = _MAGIC.get(guessed)
    if magic is not None and not head.startswith(magic):
        return _UNKNOWN_TYPE
    if guessed == "image/webp" and head[8:12] != b"WEBP":
        return _UNKNOWN_TYPE
    return guessed


_TYPES: Any = None
_TYPES_LOCK = threading.Lock()


def _types() -> Any:
    """Python's built-in MIME table only, never the system's files: the same answer on every host."""
    global _TYPES
    with _TYPES_LOCK:
        if _TYPES is None:
            import mimetypes

            _TYPES = mimetypes.MimeTypes(filenames=())
            for mime, extension in _MISSING_BEFORE_PY313:
                _TYPES.add_type(mime, extension)
        return _TYPES
