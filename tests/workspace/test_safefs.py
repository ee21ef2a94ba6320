"""fd-relative file access in directories the guest can write: never follows a symlink, never escapes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wasmexec._workspace import safefs


@pytest.mark.parametrize(
    "path", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\b", "a\x00b", "a/" + "x" * 300]
)
def test_paths_that_could_leave_the_workspace_or_are_ambiguous_are_refused(path: str) -> None:
    with pytest.raises(ValueError):
        safefs.split_relative(path)


def test_a_nested_relative_path_splits_into_its_parts() -> None:
    assert safefs.split_relative("out/2026/chart.png") == ("out", "2026", "chart.png")


def test_writing_over_a_planted_symlink_replaces_the_link_and_never_touches_its_target(tmp_path: Path) -> None:
    workspace, victim = tmp_path / "ws", tmp_path / "victim.txt"
    workspace.mkdir()
    victim.write_text("precious")
    (workspace / "data.csv").symlink_to("../victim.txt")
    root = safefs.open_root(workspace)
    try:
        safefs.write_bytes(root, ("data.csv",), b"input")
    finally:
        os.close(root)
    assert victim.read_text() == "precious"
    assert not (workspace / "data.csv").is_symlink()
    assert (workspace / "data.csv").read_bytes() == b"input"


def test_a_symlinked_directory_on_the_way_is_refused_for_writes_and_reads(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    (workspace / "sub").symlink_to("../outside")
    root = safefs.open_root(workspace)
    try:
        with pytest.raises(OSError):
            safefs.write_bytes(root, ("sub", "x.csv"), b"pwned")
        with pytest.raises(OSError):
            safefs.read_bytes(root, ("sub", "secret"), 100)
    finally:
        os.close(root)
    assert sorted(os.listdir(outside)) == ["secret"]


def test_reading_a_symlink_fails_even_when_it_points_inside(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to("real")
    root = safefs.open_root(tmp_path)
    try:
        assert safefs.read_bytes(root, ("real",), 10) == b"x"
        with pytest.raises(OSError):
            safefs.read_bytes(root, ("link",), 10)
    finally:
        os.close(root)


def test_a_read_stops_at_its_bound(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 100)
    root = safefs.open_root(tmp_path)
    try:
        with pytest.raises(OSError):
            safefs.read_bytes(root, ("big",), 99)
    finally:
        os.close(root)


def test_copy_new_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "source").write_text("new")
    out = tmp_path / "out"
    out.mkdir()
    (out / "exists").write_text("old")
    (out / "dangling").symlink_to("/nonexistent-wasmexec-target")
    root = safefs.open_root(out)
    try:
        for name in ("exists", "dangling"):
            with pytest.raises(FileExistsError):
                safefs.copy_new(root, (name,), tmp_path / "source")
        safefs.copy_new(root, ("made", "fresh"), tmp_path / "source")
    finally:
        os.close(root)
    assert (out / "exists").read_text() == "old"
    assert not Path("/nonexistent-wasmexec-target").exists()
    assert (out / "made" / "fresh").read_text() == "new"


def test_a_walk_never_follows_a_symlink_and_stops_one_past_its_cap(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(50):
        (outside / str(i)).write_text("x")
    workspace = tmp_path / "ws"
    (workspace / "d").mkdir(parents=True)
    (workspace / "d" / "f").write_text("x")
    (workspace / "escape").symlink_to("../outside")
    root = safefs.open_root(workspace)
    try:
        paths = sorted("/".join(path) for path, _ in safefs.walk(root, 100))
        assert paths == ["d", "d/f", "escape"]
        assert len(list(safefs.walk(root, 1))) == 2
    finally:
        os.close(root)


def test_copy_tree_copies_files_and_directories_and_skips_symlinks(tmp_path: Path) -> None:
    source, target, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    (source / "d" / "e").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("s")
    (source / "d" / "e" / "f.txt").write_text("data")
    (source / "top.bin").write_bytes(b"\x00")
    (source / "d" / "out").symlink_to("../../outside")
    (source / "dangling").symlink_to("../nowhere")
    target.mkdir()
    src_fd, dst_fd = safefs.open_root(source), safefs.open_root(target)
    try:
        assert safefs.copy_tree(src_fd, dst_fd, 100) == 2
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    copied = sorted(str(path.relative_to(target)) for path in target.rglob("*"))
    assert copied == ["d", "d/e", "d/e/f.txt", "top.bin"]
    assert (target / "d" / "e" / "f.txt").read_text() == "data"
