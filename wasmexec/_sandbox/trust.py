"""Whether compiled code in a directory could have been planted by someone else.

A ``.cwasm`` is native code that wasmtime maps and runs unchecked, so `artifacts` loads
one only from a directory and a file that nobody but you (or root) can write, through
the very file descriptor that was checked, and only when its record binds it to the
component and engine it was compiled for. The rules and their reasons are in
`wasmexec._sandbox.image_cache`' docstring; this module holds the checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError

#: A manifest or record is a few hundred bytes; anything larger is not ours.
MAX_RECORD_BYTES = 64 * 1024
#: Mode bits that let someone other than the owner change a directory or file.
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def trusted_owners() -> tuple[int, ...] | None:
    """You and root; None where there are no POSIX owners (Windows: the per-user dirs are private)."""
    return (os.geteuid(), 0) if hasattr(os, "geteuid") else None


def owner_problem(info: os.stat_result) -> str | None:
    owners = trusted_owners()
    if owners is None:
        return None
    if info.st_uid not in owners:
        return f"is owned by uid {info.st_uid}, not by you (uid {owners[0]}) or root"
    if info.st_mode & OTHERS_WRITE:
        return f"is writable by other users (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def directory_problem(directory: Path, tighten: bool = False) -> str | None:
    """Why files in `directory` could have been put there by someone else; None when they cannot.

    With `tighten`, a directory of yours that others could write is made unwritable to them
    first: sound, because every file in it is checked again on its own and bound to its record.
    """
    try:
        info = os.stat(directory)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    owners = trusted_owners()
    if tighten and owners is not None and info.st_uid == owners[0] and info.st_mode & OTHERS_WRITE:
        try:
            os.chmod(directory, stat.S_IMODE(info.st_mode) & ~OTHERS_WRITE)
            info = os.stat(directory)
        except OSError:
            pass
    return owner_problem(info)


def creation_problem(directory: Path) -> str | None:
    """Creates `directory` (0700) if it is missing; why it cannot be, or None."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        return f"cannot be created ({exc.strerror or exc})"
    return None


def explicit_dir_message(directory: Path, problem: str, untrusted: bool) -> str:
    """What went wrong with a cache dir the user named, and what to do about it."""
    named = "--cache-dir or WASMEXEC_CACHE_DIR; cache_dir= in Python"
    if untrusted:
        return (
            f"cache directory {directory} {problem}: compiled code in it could have been planted by another "
            f"user, so it is not used. Pass a directory only you (or root) can write ({named}), or run "
            f"`chmod go-w {directory}` if it is yours."
        )
    if problem.startswith("cannot be created"):
        return f"cache directory {directory} {problem}. Pass a directory you can write ({named})."
    return (
        f"cache directory {directory} {problem} and holds no complete build of this sandbox image to run "
        f"from read-only. Pass a writable one ({named}), or fill this one with `wasmexec build --output "
        f"{directory}` using the same wasmexec, wasmtime and tzdata versions."
    )


def fallback_dir() -> Path:
    """The default cache's stand-in in the shared temp dir, one per user."""
    owners = trusted_owners()
    return Path(tempfile.gettempdir()) / f"wasmexec-cache-{owners[0] if owners else 'user'}"


def fallback_problem(directory: Path) -> str | None:
    """Why the fallback dir may be someone else's: it must be a real directory of yours, closed to others."""
    try:
        info = os.lstat(directory)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    owners = trusted_owners()
    if owners is not None and info.st_uid != owners[0]:
        return f"is owned by uid {info.st_uid}, not by you (uid {owners[0]})"
    if owners is not None and info.st_mode & OTHERS_WRITE:
        return f"is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}, not 0700)"
    return None


def make_private_fallback(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise BuildError(f"cannot create the fallback cache directory {directory}: {exc.strerror or exc}") from exc
    problem = fallback_problem(directory)
    if problem is None:
        os.chmod(directory, 0o700)  # yours and closed to writes already; one made by an older version was 0755
        return
    raise BuildError(
        f"refusing the fallback cache directory {directory}: it {problem}. Someone may have created it "
        "to plant compiled code. Remove it, or pass --cache-dir / WASMEXEC_CACHE_DIR (a directory only "
        "you can write)."
    )


def open_trusted(path: Path) -> int | None:
    """An fd for `path` when it is a regular file, not a symlink, that only you or root can write."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or owner_problem(info) is not None:
        os.close(fd)
        return None
    return fd


def is_trusted_file(path: Path) -> bool:
    fd = open_trusted(path)
    if fd is None:
        return False
    os.close(fd)
    return True


def read_trusted(path: Path, limit: int | None = None) -> bytes | None:
    fd = open_trusted(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as stream:
        return stream.read() if limit is None else stream.read(limit + 1)


def read_record(path: Path) -> dict[str, Any] | None:
    """A small trusted JSON object (manifest or record); None when missing, untrusted or malformed."""
    data = read_trusted(path, MAX_RECORD_BYTES)
    if data is None or len(data) > MAX_RECORD_BYTES:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def binding_problem(record: dict[str, Any] | None, component_sha256: str, engine_key: str) -> str | None:
    if record is None:
        return "it has no record (or one open to others) of what it was compiled from"
    if record.get("component_sha256") != component_sha256:
        return "it was compiled from another component"
    if record.get("engine_key") != engine_key:
        return "it was compiled for another engine configuration"
    if not is_sha256(record.get("sha256")) or not isinstance(record.get("size"), int):
        return "its record is malformed"
    return None


def matches_record(fd: int, record: dict[str, Any]) -> bool:
    """Whether the open file is the one recorded: same size and mtime, else same sha256."""
    info = os.fstat(fd)
    if info.st_size != record["size"]:
        return False
    if info.st_mtime_ns == record.get("mtime_ns"):
        return True
    with os.fdopen(os.dup(fd), "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest() == str(record["sha256"])


def fd_path(fd: int, path: Path) -> str:
    """A path that opens exactly the file behind `fd` (Linux), else `path` itself."""
    through_fd = f"/proc/self/fd/{fd}"
    return through_fd if os.path.exists(through_fd) else str(path)
