"""Sessions keep files in generations: a stopped run never loses earlier files; ids are bound, capped, expire."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmexec._workspace.sessions import SessionBusy, SessionError, SessionStore, UnknownSession, guest_finished


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[SessionStore]:
    store = SessionStore(tmp_path / "sessions", ttl_s=60, max_sessions=3, max_bytes=1024 * 1024, timer=clock)
    yield store
    store.close()


def _run(store: SessionStore, session_id: str, owner: str | None, write: dict[str, bytes], keep: bool) -> str | None:
    session = store.acquire(session_id, owner)
    workspace = store.checkout(session)
    for name, data in write.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_bytes(data)
    return store.finish(session, workspace, keep=keep)


def _files(store: SessionStore, session_id: str) -> dict[str, bytes]:
    current = store.root / session_id / "current"
    return {str(p.relative_to(current)): p.read_bytes() for p in current.rglob("*") if p.is_file()}


def test_a_finished_run_commits_a_new_generation_and_a_stopped_one_changes_nothing(store: SessionStore) -> None:
    session = store.create("me")
    store.finish(session, store.checkout(session), keep=True)
    _run(store, session.id, "me", {"a.txt": b"one", "d/b.txt": b"two"}, keep=True)
    _run(store, session.id, "me", {"a.txt": b"half-writ"}, keep=False)  # stopped mid-write
    assert _files(store, session.id) == {"a.txt": b"one", "d/b.txt": b"two"}
    directory = store.root / session.id
    assert sorted(p.name for p in directory.iterdir()) == ["current", "gen-2", "lock", "owner"]  # no run copies


def test_a_run_works_in_a_copy_so_writing_the_copy_leaves_the_session_alone(store: SessionStore) -> None:
    session = store.create(None)
    store.finish(session, None, keep=False)
    _run(store, session.id, None, {"a.txt": b"kept"}, keep=True)
    session = store.acquire(session.id, None)
    workspace = store.checkout(session)
    assert (workspace / "a.txt").read_bytes() == b"kept"
    (workspace / "a.txt").write_bytes(b"changed")
    assert _files(store, session.id) == {"a.txt": b"kept"}
    store.finish(session, workspace, keep=False)


def test_symlinks_are_not_carried_to_the_next_run(store: SessionStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    session = store.create(None)
    workspace = store.checkout(session)
    os.symlink("../../../../outside.txt", workspace / "escape")
    (workspace / "real.txt").write_text("x")
    store.finish(session, workspace, keep=True)
    assert _files(store, session.id) == {"real.txt": b"x"}
    assert not (store.root / session.id / "current" / "escape").is_symlink()
    assert outside.read_text() == "host file"


def test_two_runs_of_one_session_never_overlap(store: SessionStore) -> None:
    session = store.create("me")  # reserved for its first run
    with pytest.raises(SessionBusy, match="retry when that call has returned"):
        store.acquire(session.id, "me")
    store.finish(session, None, keep=False)
    store.finish(store.acquire(session.id, "me"), None, keep=False)


@pytest.mark.parametrize("caller", ["someone else", None])
def test_another_callers_use_of_an_id_looks_like_an_unknown_id(store: SessionStore, caller: str | None) -> None:
    session = store.create("me")
    store.finish(session, None, keep=False)
    with pytest.raises(UnknownSession, match="unknown or expired session_id"):
        store.acquire(session.id, caller)
    for bogus in ("", "x" * 43, "../" * 20, session.id + "x"):
        with pytest.raises(UnknownSession):
            store.acquire(bogus, "me")


def test_an_idle_session_expires_and_its_directory_is_removed(store: SessionStore, clock: Clock) -> None:
    session = store.create(None)
    store.finish(session, None, keep=False)
    clock.now += 59
    store.finish(store.acquire(session.id, None), None, keep=False)  # used: its idle time starts again
    clock.now += 61
    with pytest.raises(UnknownSession):
        store.acquire(session.id, None)
    assert not (store.root / session.id).exists() and len(store) == 0


def test_a_session_in_use_never_expires(store: SessionStore, clock: Clock) -> None:
    session = store.create(None)
    clock.now += 3600
    store.expire()
    assert (store.root / session.id).exists()
    store.finish(session, None, keep=False)


def test_the_number_of_sessions_is_capped(store: SessionStore) -> None:
    for _ in range(3):
        store.finish(store.create(None), None, keep=False)
    with pytest.raises(SessionError, match="already holds 3 sessions"):
        store.create(None)


def test_a_run_that_would_pass_the_byte_cap_keeps_the_earlier_files(store: SessionStore) -> None:
    session = store.create(None)
    store.finish(session, None, keep=False)
    _run(store, session.id, None, {"a": b"1"}, keep=True)
    warning = _run(store, session.id, None, {"big": b"x" * (2 * 1024 * 1024)}, keep=True)
    assert warning is not None and "were not kept" in warning
    assert _files(store, session.id) == {"a": b"1"}


def test_a_stopped_servers_sessions_are_taken_over_and_a_live_ones_are_not(tmp_path: Path) -> None:
    live = SessionStore(tmp_path / "s")
    held = live.create("me")
    live.finish(held, None, keep=False)
    old = SessionStore(tmp_path / "s")
    assert len(old) == 0  # the live server's session is not taken
    session = old.create("stdio")
    workspace = old.checkout(session)
    (workspace / "a.txt").write_text("kept")
    old.finish(session, workspace, keep=True)
    stale = old.checkout(old.acquire(session.id, "stdio"))  # a run in the middle when the server stopped
    (stale / "a.txt").write_text("half")
    os.symlink("gen-9", tmp_path / "s" / session.id / "current.new")  # and in the middle of a swap
    old.close()
    os.close(session.lock_fd)  # the server dies: its lock goes with it
    new = SessionStore(tmp_path / "s")
    try:
        assert len(new) == 1
        with pytest.raises(UnknownSession):
            new.acquire(session.id, "someone else")
        taken = new.acquire(session.id, "stdio")
        assert (new.checkout(taken) / "a.txt").read_text() == "kept" and not stale.exists()
        assert not (tmp_path / "s" / session.id / "current.new").is_symlink()
        new.finish(taken, None, keep=False)
    finally:
        new.close()
        live.close()


def test_broken_or_expired_sessions_are_removed_when_a_server_starts(tmp_path: Path) -> None:
    broken = tmp_path / "s" / ("A" * 43)
    (broken / "run-0123").mkdir(parents=True)
    old = SessionStore(tmp_path / "s")
    expired = old.create(None)
    old.finish(expired, None, keep=False)
    old.close()
    os.utime(expired.directory / "current", (0, 0), follow_symlinks=False)
    new = SessionStore(tmp_path / "s", ttl_s=60)
    assert len(new) == 0 and not broken.exists() and not expired.directory.exists()
    new.close()


def test_a_run_stopped_by_the_host_did_not_finish_but_an_uncaught_exception_did() -> None:
    def result(*codes: str) -> dict[str, object]:
        return {"diagnostics": [{"severity": "error", "code": code, "message": ""} for code in codes]}

    assert guest_finished(result("UNCAUGHT_EXCEPTION"))  # type: ignore[arg-type]
    assert guest_finished(result())  # type: ignore[arg-type]
    for code in ("SANDBOX_LIMIT", "SANDBOX_TRAP", "BLOCKING_WAIT", "INTERNAL_ERROR"):
        assert not guest_finished(result("UNCAUGHT_EXCEPTION", code))  # type: ignore[arg-type]


def test_the_reaper_removes_an_expired_session_without_any_call(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s", ttl_s=0.2, reaper=True)
    session = store.create(None)
    store.finish(session, None, keep=False)
    directory = store.root / session.id
    try:
        deadline = time.monotonic() + 10
        while directory.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not directory.exists() and len(store) == 0
    finally:
        store.close()


def test_what_the_server_keeps_with_a_session_lives_while_it_is_used_and_ends_with_it(tmp_path: Path) -> None:
    now = [0.0]
    store = SessionStore(tmp_path / "sessions", ttl_s=3, timer=lambda: now[0])
    session = store.create("me")
    session.vault = vault = object()
    store.finish(session, None, keep=False)
    for _ in range(5):  # a use every second, for longer than the TTL: the same session, the same vault
        now[0] += 1
        again = store.acquire(session.id, "me")
        assert again is session and again.vault is vault
        store.finish(again, None, keep=False)
    now[0] += 3.5
    with pytest.raises(UnknownSession):
        store.acquire(session.id, "me")
    assert store.create("me").vault is None


def test_ending_a_session_is_idempotent_and_frees_it_at_once(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions", max_sessions=1)
    session = store.create("me")
    store.finish(session, None, keep=False)
    assert not store.end(session.id, "other")  # another caller's looks unknown, and stays
    assert store.end(session.id, "me") and not session.directory.exists() and len(store) == 0
    assert not store.end(session.id, "me")
    store.create("me")  # the slot is free
