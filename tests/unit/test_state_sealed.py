"""Sealed streams and trees: what comes back is what was sealed, or a SealError; never a file outside the target."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from wasmexec._state.key import SealError, StateKey
from wasmexec._state.sealed import CHUNK_BYTES, OpeningReader, SealingWriter, pack_tree, unpack_tree
from wasmexec._workspace import safefs

SEALER = StateKey(b"s" * 32, source="test").sealer("sessions")


def _sealed(data: bytes, bound: bytes = b"here") -> bytes:
    out = io.BytesIO()
    writer = SealingWriter(out, SEALER, bound)
    writer.write(data)
    writer.close()
    return out.getvalue()


def _opened(sealed: bytes, size: int, bound: bytes = b"here") -> bytes:
    reader = OpeningReader(io.BytesIO(sealed), SEALER, bound)
    data = reader.read_exact(size)
    if not reader.at_end():
        raise SealError("more")
    return data


@pytest.mark.parametrize("size", [0, 1, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES + 5])
def test_a_stream_opens_to_what_was_sealed(size: int) -> None:
    data = os.urandom(size)
    assert _opened(_sealed(data), size) == data


def test_a_stream_cut_at_a_chunk_boundary_reordered_or_moved_does_not_open() -> None:
    data = os.urandom(2 * CHUNK_BYTES + 10)
    sealed = _sealed(data)
    first = 4 + int.from_bytes(sealed[:4], "big")
    second = first + 4 + int.from_bytes(sealed[first : first + 4], "big")
    with pytest.raises(SealError, match=r"cut short|less than"):
        _opened(sealed[:second], len(data))  # two whole chunks, the last one dropped
    with pytest.raises(SealError, match="does not open"):
        _opened(sealed[first:second] + sealed[:first] + sealed[second:], len(data))
    with pytest.raises(SealError, match="does not open"):
        _opened(sealed, len(data), bound=b"elsewhere")
    with pytest.raises(SealError):
        _opened(sealed + sealed[:first], len(data))  # something after the end


def test_a_tree_keeps_files_and_directories_and_drops_symlinks(tmp_path: Path) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    (source / "d" / "empty").mkdir(parents=True)
    (source / "d" / "f.bin").write_bytes(os.urandom(CHUNK_BYTES + 3))
    (source / "é.txt").write_text("accent")
    os.symlink("/etc/passwd", source / "link")
    target.mkdir()
    out = io.BytesIO()
    writer = SealingWriter(out, SEALER, b"tree")
    source_fd, target_fd = safefs.open_root(source), safefs.open_root(target)
    try:
        pack_tree(source_fd, writer, 100)
        writer.close()
        unpack_tree(OpeningReader(io.BytesIO(out.getvalue()), SEALER, b"tree"), target_fd, 100, 10 * CHUNK_BYTES)
    finally:
        os.close(source_fd)
        os.close(target_fd)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == ["d", "d/empty", "d/f.bin", "é.txt"]
    assert (target / "d" / "f.bin").read_bytes() == (source / "d" / "f.bin").read_bytes()


def test_a_tree_over_its_bounds_or_with_a_bad_path_is_refused(tmp_path: Path) -> None:
    def tree(records: bytes) -> OpeningReader:
        return OpeningReader(io.BytesIO(_sealed(records, b"tree")), SEALER, b"tree")

    target = tmp_path / "target"
    target.mkdir()
    fd = safefs.open_root(target)
    try:
        escape = b"F" + (5).to_bytes(2, "big") + b"../up" + (1).to_bytes(8, "big") + b"x" + b"E"
        with pytest.raises(SealError, match="bad path"):
            unpack_tree(tree(escape), fd, 10, 100)
        big = b"F" + (1).to_bytes(2, "big") + b"a" + (1000).to_bytes(8, "big") + b"x" * 1000 + b"E"
        with pytest.raises(SealError, match="more entries or bytes"):
            unpack_tree(tree(big), fd, 10, 100)
    finally:
        os.close(fd)
    assert not (tmp_path / "up").exists()
