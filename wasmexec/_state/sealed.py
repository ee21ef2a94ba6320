"""Sealed files on the state directory: small values, byte streams, and whole directory trees.

A shared volume must never hold session files, PII or artifacts in clear text, and what a
replica reads back must be what a replica wrote. So everything kept there goes through a
`Sealer` (AES-256-GCM under the state key) and is bound to where it belongs (a session id
and a name): a sealed file copied to another place, swapped for an older one of another
session, changed, cut short or sealed under another key does not open (`SealError`).

Large values are sealed as a stream of chunks (``u32 length | seal``, `CHUNK_BYTES` of
plaintext each), each bound to its place, its index and whether it is the last one, so
chunks cannot be reordered, dropped or cut off at a chunk boundary, and neither side ever
holds more than one chunk in memory.

A tree (a session's files) is a stream of records: ``D`` + path (a directory), ``F`` +
path + size + bytes (a regular file), ``E`` (the end). Symlinks and anything else that is
not a file or directory are never packed (so never carried to a later run), and unpacking
creates everything fd-relative, below the target, never following a symlink, with the
path of every record checked and the number of entries and bytes bounded.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from wasmexec._state.key import Sealer, SealError
from wasmexec._workspace import safefs

#: Plaintext per sealed chunk: large enough that sealing costs little per byte, small enough for memory.
CHUNK_BYTES = 1024 * 1024
#: A sealed chunk's length prefix.
_LENGTH = struct.Struct(">I")
#: Version, nonce and tag that sealing adds to a chunk (`wasmexec._state.key.Sealer`).
_OVERHEAD = 1 + 12 + 16
_PATH_LENGTH = struct.Struct(">H")
_SIZE = struct.Struct(">Q")


def write_sealed(path: Path, data: bytes, sealer: Sealer, bound_to: bytes) -> None:
    """Seals `data` into a new file at `path`, atomically (a temporary name, then rename)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    try:
        with open(temporary, "xb", opener=private_file) as out:
            out.write(sealer.seal(data, bound_to))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_sealed(path: Path, sealer: Sealer, bound_to: bytes, max_bytes: int) -> bytes:
    """The plaintext of a file `write_sealed` made.

    Raises:
        FileNotFoundError: there is none.
        SealError: it does not open (see the module), or is over `max_bytes`.
    """
    with open(path, "rb", opener=no_follow) as handle:
        sealed = handle.read(max_bytes + _OVERHEAD + 1)
    if len(sealed) > max_bytes + _OVERHEAD:
        raise SealError(f"{path.name} is larger than a sealed value may be")
    return sealer.open(sealed, bound_to)


class SealingWriter:
    """A binary writer that seals what it is given in chunks (see the module); `close` seals the last one."""

    def __init__(self, out: BinaryIO, sealer: Sealer, bound_to: bytes) -> None:
        self._out, self._sealer, self._bound = out, sealer, bound_to
        self._buffer = bytearray()
        self._index = 0
        self.plaintext_bytes = 0

    def write(self, data: bytes | memoryview) -> None:
        self._buffer += data
        self.plaintext_bytes += len(data)
        while len(self._buffer) > CHUNK_BYTES:  # keep at least one byte back: the last chunk is sealed by close
            self._emit(bytes(self._buffer[:CHUNK_BYTES]), final=False)
            del self._buffer[:CHUNK_BYTES]

    def close(self) -> None:
        self._emit(bytes(self._buffer), final=True)
        self._buffer.clear()

    def _emit(self, chunk: bytes, *, final: bool) -> None:
        sealed = self._sealer.seal(chunk, _chunk_binding(self._bound, self._index, final))
        self._out.write(_LENGTH.pack(len(sealed)) + sealed)
        self._index += 1


class OpeningReader:
    """Reads back what a `SealingWriter` wrote, chunk by chunk; every byte it returns has been authenticated."""

    def __init__(self, source: BinaryIO, sealer: Sealer, bound_to: bytes) -> None:
        self._source, self._sealer, self._bound = source, sealer, bound_to
        self._buffer = b""
        self._offset = 0
        self._index = 0
        self._ended = False

    def read_exact(self, size: int) -> bytes:
        """The next `size` bytes. Raises SealError when the stream ends first or does not open."""
        parts = []
        while size > 0:
            if self._offset == len(self._buffer):
                self._next_chunk()
            piece = self._buffer[self._offset : self._offset + size]
            self._offset += len(piece)
            size -= len(piece)
            parts.append(piece)
        return b"".join(parts)

    def at_end(self) -> bool:
        """Whether everything was read: the last chunk was opened and used up, and nothing follows it."""
        while self._offset == len(self._buffer) and not self._ended:
            self._next_chunk()
        return self._ended and self._offset == len(self._buffer) and not self._source.read(1)

    def _next_chunk(self) -> None:
        if self._ended:
            raise SealError("the sealed stream holds less than it says")
        head = self._source.read(_LENGTH.size)
        if len(head) != _LENGTH.size:
            raise SealError("the sealed stream is cut short")
        (length,) = _LENGTH.unpack(head)
        if length > CHUNK_BYTES + _OVERHEAD:
            raise SealError("the sealed stream has a chunk larger than any sealed chunk")
        sealed = self._source.read(length)
        if len(sealed) != length:
            raise SealError("the sealed stream is cut short")
        for final in (False, True):  # the flag is bound, not stored: only the true one opens
            try:
                self._buffer = self._sealer.open(sealed, _chunk_binding(self._bound, self._index, final))
            except SealError:
                continue
            self._offset, self._ended = 0, final
            self._index += 1
            return
        raise SealError("a chunk of the sealed stream does not open (tampered with, moved, or another key)")


def _chunk_binding(bound_to: bytes, index: int, final: bool) -> bytes:
    return bound_to + b"\x00chunk" + index.to_bytes(8, "big") + (b"\x01" if final else b"\x00")


# -- trees --------------------------------------------------------------------------------------


def pack_tree(source_fd: int, out: SealingWriter, max_entries: int) -> int:
    """Writes the directories and regular files below `source_fd` as records; returns how many entries.

    Symlinks, devices, sockets and FIFOs are left out (never followed). A file that changes into
    something else while it is read is left out too.

    Raises:
        OverflowError: more than `max_entries` entries.
    """
    entries = 0
    for path, info in safefs.walk(source_fd, max_entries):
        entries += 1
        if entries > max_entries:
            raise OverflowError(f"more than {max_entries} entries")
        name = _encoded(path)
        if stat.S_ISDIR(info.st_mode):
            out.write(b"D" + _PATH_LENGTH.pack(len(name)) + name)
        elif stat.S_ISREG(info.st_mode):
            try:
                with safefs.opened_file(source_fd, path) as (fd, opened):
                    out.write(b"F" + _PATH_LENGTH.pack(len(name)) + name + _SIZE.pack(opened.st_size))
                    left = opened.st_size
                    while left > 0:
                        chunk = os.read(fd, min(safefs.CHUNK_BYTES, left))
                        if not chunk:  # shrank while read: pad, so the record keeps the size it announced
                            chunk = bytes(min(safefs.CHUNK_BYTES, left))
                        out.write(chunk)
                        left -= len(chunk)
            except OSError:
                continue  # swapped for a symlink, or removed, since the walk saw it
    out.write(b"E")
    return entries


def unpack_tree(reader: OpeningReader, target_fd: int, max_entries: int, max_bytes: int) -> None:
    """Recreates below `target_fd` (an empty directory) the tree `pack_tree` wrote.

    Raises:
        SealError: the stream does not open, or does not hold a well-formed tree within the bounds.
    """
    entries = total = 0
    for kind, parts, size in _records(reader):
        entries += 1
        total += size
        if entries > max_entries or total > max_bytes:
            raise SealError("the sealed tree holds more entries or bytes than a session may")
        try:
            if kind == b"D":
                with safefs.opened_dir(target_fd, parts, create=True):
                    pass
                continue
            with safefs.created(target_fd, parts, replace=False) as out:
                left = size
                while left > 0:
                    view = memoryview(reader.read_exact(min(safefs.CHUNK_BYTES, left)))
                    left -= len(view)
                    while view:
                        view = view[os.write(out, view) :]
        except OSError as exc:
            raise SealError(
                f"the sealed tree cannot be recreated at {'/'.join(parts)!r}: {exc.strerror or exc}"
            ) from None
    if not reader.at_end():
        raise SealError("the sealed tree has bytes after its end")


def _records(reader: OpeningReader) -> Iterator[tuple[bytes, tuple[str, ...], int]]:
    while (kind := reader.read_exact(1)) != b"E":
        if kind not in (b"D", b"F"):
            raise SealError("the sealed tree has a record of an unknown kind")
        (length,) = _PATH_LENGTH.unpack(reader.read_exact(_PATH_LENGTH.size))
        try:
            parts = safefs.split_relative(os.fsdecode(reader.read_exact(length)))
        except ValueError as exc:
            raise SealError(f"the sealed tree has a bad path: {exc}") from None
        size = _SIZE.unpack(reader.read_exact(_SIZE.size))[0] if kind == b"F" else 0
        yield kind, parts, size


def _encoded(path: tuple[str, ...]) -> bytes:
    name = os.fsencode("/".join(path))
    if len(name) > safefs.MAX_PATH_CHARS:
        raise OverflowError("a path longer than a workspace path may be")
    return name


def private_file(path: str, flags: int) -> int:
    """An `open` opener: a new file is private (0600); a symlink is never followed."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def no_follow(path: str, flags: int) -> int:
    """An `open` opener that never follows a symlink."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
