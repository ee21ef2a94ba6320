"""File access inside directories the guest can write: fd-relative, never following a symlink.

The guest can create symlinks whose targets point outside its workspace (``../x``); a
path-based host ``open`` would follow one and read or overwrite a host file. So every
access here opens each directory component relative to its parent's descriptor with
``O_NOFOLLOW`` (a symlink fails with ELOOP or ENOTDIR), and files are created with
``O_CREAT | O_EXCL | O_NOFOLLOW``. Relative paths given by users or by the guest are
checked by `split_relative` first.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Flags of a directory opened for fd-relative access; a symlink in its place fails.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Longest relative path accepted (Linux PATH_MAX) and longest component (NAME_MAX).
MAX_PATH_CHARS = 4096
MAX_NAME_BYTES = 255
#: Read and copy in chunks of this size.
CHUNK_BYTES = 1024 * 1024


def split_relative(path: str) -> tuple[str, ...]:
    """The components of a path relative to a workspace, e.g. ``"a/b.csv"`` → ``("a", "b.csv")``.

    Raises:
        ValueError: the path is empty, absolute, has an empty, ``.`` or ``..`` component, a NUL or
            backslash, or is too long.
    """
    if not isinstance(path, str):
        raise TypeError(f"a workspace path must be a str, not {type(path).__name__}")
    if not path or len(path) > MAX_PATH_CHARS:
        raise ValueError(f"workspace path {path[:80]!r} must have 1 to {MAX_PATH_CHARS} characters")
    if path.startswith("/") or "\x00" in path or "\\" in path:
        raise ValueError(f"workspace path {path[:80]!r} must be relative, without NUL or backslash")
    parts = tuple(path.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"workspace path {path[:80]!r} must not have empty, '.' or '..' components")
        if len(os.fsencode(part)) > MAX_NAME_BYTES:
            raise ValueError(f"workspace path {path[:80]!r} has a component over {MAX_NAME_BYTES} bytes")
    return parts


def open_root(path: str | os.PathLike[str]) -> int:
    """A descriptor of a workspace root chosen by the host or the user (the path itself may be a symlink)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


@contextmanager
def opened_dir(root_fd: int, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
    """The directory `parts` below `root_fd`, opened component by component without following symlinks.

    Raises:
        OSError: a component is missing (unless `create`), not a directory, or a symlink (ELOOP/ENOTDIR).
    """
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def write_bytes(root_fd: int, parts: tuple[str, ...], data: bytes) -> None:
    """Creates (or replaces) the file `parts` with `data`; a symlink there is replaced, never followed."""
    with created(root_fd, parts) as out:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view[:CHUNK_BYTES]) :]


def copy_in(root_fd: int, parts: tuple[str, ...], source: str | os.PathLike[str]) -> None:
    """Copies the user's file `source` (a symlink the user chose is followed) to `parts` below `root_fd`."""
    with open(source, "rb") as src, created(root_fd, parts) as out:
        while chunk := src.read(CHUNK_BYTES):
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]


def copy_new(root_fd: int, parts: tuple[str, ...], source: str | os.PathLike[str]) -> None:
    """Copies `source` to a new file `parts` below `root_fd`, which must not exist yet.

    Raises:
        FileExistsError: something (a file, a symlink) is already there; it is left alone.
        OSError: a directory on the way is a symlink or not a directory.
    """
    with open(source, "rb") as src, created(root_fd, parts, replace=False) as out:
        while chunk := src.read(CHUNK_BYTES):
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]


@contextmanager
def created(root_fd: int, parts: tuple[str, ...], replace: bool = True) -> Iterator[int]:
    """A new file `parts` below `root_fd` (0600, its directories made), open for writing; never a symlink followed.

    With `replace` whatever is there is unlinked first; else something there fails (FileExistsError)."""
    with opened_dir(root_fd, parts[:-1], create=True) as parent:
        if replace:
            try:
                os.unlink(parts[-1], dir_fd=parent)  # a file or symlink already there: removed, never followed
            except FileNotFoundError:
                pass
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=parent)  # fmt: skip
        try:
            yield fd
        finally:
            os.close(fd)


@contextmanager
def opened_file(root_fd: int, parts: tuple[str, ...]) -> Iterator[tuple[int, os.stat_result]]:
    """The regular file `parts` below `root_fd`, opened for reading without following any symlink.

    Raises:
        OSError: missing, a symlink anywhere on the path (ELOOP/ENOTDIR), or not a regular file (EINVAL).
    """
    with opened_dir(root_fd, parts[:-1]) as parent:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(22, "not a regular file", "/".join(parts))
        yield fd, info
    finally:
        os.close(fd)


def read_bytes(root_fd: int, parts: tuple[str, ...], max_bytes: int) -> bytes:
    """The content of the regular file `parts` (see `opened_file`), at most `max_bytes` of it.

    Raises:
        OSError: as `opened_file`; EFBIG when the file is larger than `max_bytes`.
    """
    with opened_file(root_fd, parts) as (fd, info):
        if info.st_size > max_bytes:
            raise OSError(27, f"larger than {max_bytes} bytes", "/".join(parts))
        chunks = []
        left = max_bytes + 1
        while left > 0 and (chunk := os.read(fd, min(CHUNK_BYTES, left))):
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise OSError(27, f"larger than {max_bytes} bytes", "/".join(parts))
        return data


def walk(
    root_fd: int,
    max_entries: int,
    prefix: tuple[str, ...] = (),
    on_dir: Callable[[tuple[str, ...], int], None] | None = None,
) -> Iterator[tuple[tuple[str, ...], os.stat_result]]:
    """Every entry below `root_fd` (files, directories, symlinks; lstat), depth first, never following a symlink.

    Stops after `max_entries + 1` entries, so the caller sees that a cap was passed without the
    walk costing more. A directory that vanishes or turns into a symlink mid-walk is skipped.
    Paths start with `prefix`; `on_dir(path, fd)` is called for each directory (the root
    included) just before it is listed, so a watch added there misses nothing.
    """
    seen = 0
    stack: list[tuple[tuple[str, ...], int]] = [(prefix, os.dup(root_fd))]
    try:
        while stack:
            prefix, fd = stack.pop()
            try:
                if on_dir is not None:
                    on_dir(prefix, fd)
                with os.scandir(fd) as entries:
                    for entry in entries:
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        seen += 1
                        path = (*prefix, entry.name)
                        yield path, info
                        if seen > max_entries:
                            return
                        if stat.S_ISDIR(info.st_mode):
                            try:
                                stack.append((path, os.open(entry.name, DIR_FLAGS, dir_fd=fd)))
                            except OSError:
                                pass
            finally:
                os.close(fd)
    finally:
        for _, fd in stack:
            os.close(fd)


def charge(info: os.stat_result) -> int:
    """Bytes an entry is charged: its size or its blocks, whichever is larger (a sparse file by its size)."""
    return max(info.st_size, info.st_blocks * 512)


def copy_tree(source_fd: int, target_fd: int, max_entries: int) -> int:
    """Copies the regular files and directories below `source_fd` into `target_fd` (which should be empty).

    Symlinks and anything else that is not a file or directory are skipped, never followed
    (returns how many were skipped); hard links become separate files. Stops after
    `max_entries + 1` entries: check the source's size first (for example with a quota walk).
    For copy-on-run generations of a persistent workspace.
    """
    skipped = 0
    for path, info in walk(source_fd, max_entries):
        if stat.S_ISDIR(info.st_mode):
            with opened_dir(target_fd, path, create=True):
                pass
        elif stat.S_ISREG(info.st_mode):
            try:
                with opened_file(source_fd, path) as (fd, _), created(target_fd, path, replace=False) as out:
                    while chunk := os.read(fd, CHUNK_BYTES):
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(out, view) :]
            except OSError:
                skipped += 1  # swapped for a symlink since the walk saw it
        else:
            skipped += 1
    return skipped
