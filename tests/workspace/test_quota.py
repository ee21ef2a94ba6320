"""The workspace quota on real directories: what is charged, and that every change is seen."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from wasmexec._envelope import StopReason
from wasmexec._workspace import safefs
from wasmexec._workspace.quota import Quota


@pytest.fixture(params=["inotify", "scan"])
def quota(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Quota]:
    (tmp_path / "ws").mkdir()
    (tmp_path / "tmp").mkdir()
    roots = [safefs.open_root(tmp_path / "ws"), safefs.open_root(tmp_path / "tmp")]
    # A walk on every check, however slow (a loaded machine would otherwise space the walks out).
    quota = Quota(roots, max_bytes=1 << 20, max_entries=20, scan_budget_s=float("inf"))
    assert quota.start() is None
    if request.param == "scan":
        quota.close()  # what happens without inotify: every check walks the roots
    elif not quota.watching:
        pytest.skip("no inotify here")
    yield quota
    quota.close()
    for fd in roots:
        os.close(fd)


def test_an_empty_workspace_charges_nothing(quota: Quota) -> None:
    assert (quota.check(), quota.bytes, quota.entries) == (None, 0, 0)


def test_bytes_past_the_cap_in_either_root_are_seen_at_the_next_check(quota: Quota, tmp_path: Path) -> None:
    (tmp_path / "ws" / "a").write_bytes(b"x" * 600_000)
    assert quota.check() is None
    (tmp_path / "tmp" / "b").write_bytes(b"x" * 600_000)
    assert quota.check() == "workspace_bytes"
    (tmp_path / "tmp" / "b").unlink()
    assert quota.check() is None


def test_a_sparse_file_is_charged_by_its_size(quota: Quota, tmp_path: Path) -> None:
    with open(tmp_path / "ws" / "sparse", "wb") as file:
        file.truncate(10**12)
    assert quota.check() == "workspace_bytes"


def test_hard_links_are_charged_once_and_every_name_counts_as_an_entry(quota: Quota, tmp_path: Path) -> None:
    (tmp_path / "ws" / "a").write_bytes(b"x" * 700_000)
    os.link(tmp_path / "ws" / "a", tmp_path / "ws" / "b")
    assert quota.check() is None
    assert quota.entries == 2
    assert 700_000 <= quota.bytes < 800_000


def test_files_in_new_and_renamed_directories_are_counted(quota: Quota, tmp_path: Path) -> None:
    (tmp_path / "ws" / "a" / "b").mkdir(parents=True)
    assert quota.check() is None
    os.rename(tmp_path / "ws" / "a", tmp_path / "ws" / "c")
    for i in range(20):
        (tmp_path / "ws" / "c" / "b" / str(i)).write_text("x")
    assert quota.check() == "workspace_files"


def test_a_symlink_to_a_big_directory_outside_is_one_entry_and_never_walked(quota: Quota, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(50):
        (outside / str(i)).write_bytes(b"x" * 100_000)
    (tmp_path / "ws" / "d").mkdir()
    os.rename(tmp_path / "ws" / "d", tmp_path / "ws" / "e")
    (tmp_path / "ws" / "d").symlink_to("../outside")
    assert quota.check() is None
    assert quota.entries == 2


def test_a_deleted_file_is_no_longer_charged(quota: Quota, tmp_path: Path) -> None:
    (tmp_path / "ws" / "a").write_bytes(b"x" * 600_000)
    assert quota.check() is None
    (tmp_path / "ws" / "a").unlink()
    assert quota.check() is None
    assert quota.bytes == 0


def test_a_file_deleted_while_open_is_charged_while_it_grows(quota: Quota, tmp_path: Path) -> None:
    with open(tmp_path / "ws" / "hidden", "wb") as file:
        os.unlink(tmp_path / "ws" / "hidden")
        file.write(b"x" * 100)
        file.flush()
        quota.check()
        file.write(b"x" * 2_000_000)
        file.flush()
        assert quota.check() == "workspace_bytes"
    assert quota.check() is None


def test_without_inotify_slow_walks_are_spaced_out(tmp_path: Path) -> None:
    roots = [safefs.open_root(tmp_path)]
    quota = Quota(roots, max_bytes=1, max_entries=10, scan_budget_s=1e-6)  # every walk is "slow"
    try:
        assert quota.start() is None
        quota.close()
        assert quota.check() is None  # the first walk: the next ones are spaced out
        (tmp_path / "big").write_bytes(b"x" * 10)
        verdicts = [quota.check()]
        while verdicts[-1] is None and len(verdicts) < 5_000_000:  # the skips grow with the walk's cost (load)
            verdicts.append(quota.check())
        assert verdicts[0] is None  # not walked again at once
        assert verdicts[-1] == "workspace_bytes"  # but walked again later
    finally:
        os.close(roots[0])


def _grow(file: BinaryIO, quota: Quota) -> StopReason | None:
    """Writes 2 MB (past the 1 MiB cap) through `file` and checks."""
    file.write(b"x" * 2_000_000)
    file.flush()
    return quota.check()


def test_a_name_used_again_after_its_deletion_is_charged_again(quota: Quota, tmp_path: Path) -> None:
    with open(tmp_path / "ws" / "x", "wb") as first:
        os.unlink(tmp_path / "ws" / "x")
        assert quota.check() is None
        with open(tmp_path / "ws" / "x", "wb") as second:
            os.unlink(tmp_path / "ws" / "x")
            assert quota.check() is None
            assert _grow(second, quota) == "workspace_bytes"
        assert first.tell() == 0


def test_a_file_renamed_over_while_open_is_charged(quota: Quota, tmp_path: Path) -> None:
    (tmp_path / "ws" / "y").write_bytes(b"")
    os.rename(tmp_path / "ws" / "y", tmp_path / "ws" / "z")
    assert quota.check() is None  # the name "y" vanished once already
    with open(tmp_path / "ws" / "x", "wb") as file:
        assert quota.check() is None
        (tmp_path / "ws" / "y").write_bytes(b"")
        os.rename(tmp_path / "ws" / "y", tmp_path / "ws" / "x")
        assert quota.check() is None
        assert _grow(file, quota) == "workspace_bytes"


def test_a_file_whose_hard_links_went_one_by_one_is_charged(quota: Quota, tmp_path: Path) -> None:
    with open(tmp_path / "ws" / "a", "wb") as file:
        os.link(tmp_path / "ws" / "a", tmp_path / "tmp" / "b")
        assert quota.check() is None
        os.unlink(tmp_path / "ws" / "a")
        assert quota.check() is None
        os.unlink(tmp_path / "tmp" / "b")
        assert _grow(file, quota) == "workspace_bytes"


def test_an_open_file_in_a_removed_directory_is_charged(quota: Quota, tmp_path: Path) -> None:
    (tmp_path / "tmp" / "d").mkdir()
    assert quota.check() is None
    with open(tmp_path / "tmp" / "d" / "x", "wb") as file:
        assert quota.check() is None
        os.unlink(tmp_path / "tmp" / "d" / "x")
        os.rmdir(tmp_path / "tmp" / "d")
        assert quota.check() is None
        assert _grow(file, quota) == "workspace_bytes"


def test_files_created_and_deleted_between_two_checks_are_charged_while_open(quota: Quota, tmp_path: Path) -> None:
    files = []
    try:
        for _ in range(3):
            for _ in range(2):
                files.append(open(tmp_path / "ws" / "x", "wb"))
                files[-1].write(b"x" * 200_000)
                files[-1].flush()
                os.unlink(tmp_path / "ws" / "x")
            if quota.check() is not None:
                break
        assert quota.check() == "workspace_bytes"
        assert quota.bytes >= 1_200_000
    finally:
        for file in files:
            file.close()


@pytest.mark.parametrize("closed", [0, 1])
def test_a_deleted_file_still_open_through_another_handle_is_charged(quota: Quota, tmp_path: Path, closed: int) -> None:
    with open(tmp_path / "ws" / "x", "wb") as first, open(tmp_path / "ws" / "x", "ab") as second:
        os.unlink(tmp_path / "ws" / "x")
        assert quota.check() is None
        handles = [first, second]
        handles[closed].close()  # the quota may have noted either descriptor: one order closes that one
        assert quota.check() is None
        assert _grow(handles[1 - closed], quota) == "workspace_bytes"
