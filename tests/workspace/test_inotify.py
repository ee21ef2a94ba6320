"""The process's one inotify instance, shared by every run's quota: events reach the right run."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmexec._workspace import inotify, safefs
from wasmexec._workspace.quota import Quota

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="inotify is Linux only")


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path, int, int]]:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    fds = (safefs.open_root(a), safefs.open_root(b))
    yield a, b, *fds
    for fd in fds:
        os.close(fd)


def _names(subscription: inotify.Subscription) -> set[str]:
    return {name for _, _, name in subscription.events()}


def test_each_subscription_gets_the_events_of_its_own_directories(dirs: tuple[Path, Path, int, int]) -> None:
    a, b, a_fd, b_fd = dirs
    first, second = inotify.subscribe(), inotify.subscribe()
    try:
        first.watch_fd(a_fd)
        second.watch_fd(b_fd)
        (a / "x").write_text("1")
        (b / "y").write_text("1")
        assert _names(second) == {"y"}  # read (and filed) by the second: the first's wait for it
        assert _names(first) == {"x"}
    finally:
        first.close()
        second.close()


def test_two_runs_watching_one_directory_both_see_it_until_each_closes(dirs: tuple[Path, Path, int, int]) -> None:
    a, _, a_fd, _ = dirs
    first, second = inotify.subscribe(), inotify.subscribe()
    try:
        assert first.watch_fd(a_fd) == second.watch_fd(a_fd)  # the kernel gives one descriptor per inode
        first.close()  # must not take the second's watch with it
        (a / "x").write_text("1")
        assert _names(second) == {"x"}
        assert _names(first) == set()
    finally:
        second.close()


def test_a_subscription_that_falls_behind_is_told_to_rescan(
    dirs: tuple[Path, Path, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inotify, "MAX_PENDING_EVENTS", 10)
    a, _, a_fd, _ = dirs
    roots = [a_fd]
    quota = Quota(roots, max_bytes=1 << 30, max_entries=1000)
    behind = inotify.subscribe()
    try:
        assert quota.start() is None
        behind.watch_fd(a_fd)
        for i in range(30):
            (a / str(i)).write_text("x")
        assert quota.check() is None  # drains the shared queue: the other subscription's share overflows
        assert (-1, inotify.IN_Q_OVERFLOW, "") in behind.events()
        assert quota.entries == 30
    finally:
        behind.close()
        quota.close()


def test_quotas_checking_on_many_threads_each_count_their_own_files(tmp_path: Path) -> None:
    runs = 8
    verdicts: list[object] = [None] * runs
    start = threading.Barrier(runs)

    def run(index: int) -> None:
        root = tmp_path / str(index)
        root.mkdir()
        fd = safefs.open_root(root)
        quota = Quota([fd], max_bytes=1 << 30, max_entries=20 + index)
        try:
            assert quota.start() is None
            start.wait()
            for i in range(20 + index):
                (root / str(i)).write_text("x")
                assert quota.check() is None
            (root / "last").write_text("x")
            verdicts[index] = (quota.check(), quota.entries)
        finally:
            quota.close()
            os.close(fd)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert verdicts == [("workspace_files", 21 + i) for i in range(runs)]
