"""Sessions keep files in sealed generations on shared storage: a stopped run never loses earlier files; ids are
bound, capped, expire; any store on the directory (another replica) serves any session, one run at a time."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmexec._state.key import StateKey
from wasmexec._state.sessions import (
    DamagedSession,
    SessionBusy,
    SessionError,
    SessionStore,
    UnknownSession,
    guest_finished,
)

KEY = StateKey(b"k" * 32, source="test")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _store(root: Path, clock: Clock, **options: float) -> SessionStore:
    settings = {"ttl_s": 60, "max_sessions": 3, "max_bytes": 1024 * 1024, **options}
    return SessionStore(root, key=KEY, timer=clock, **settings)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[SessionStore]:
    store = _store(tmp_path / "sessions", clock)
    yield store
    store.close()


def _run(store: SessionStore, session_id: str, owner: str | None, write: dict[str, bytes], keep: bool) -> str | None:
    session = store.acquire(session_id, owner)
    workspace = store.checkout(session)
    for name, data in write.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_bytes(data)
    return store.finish(session, workspace, keep=keep)


def _files(store: SessionStore, session_id: str, owner: str | None) -> dict[str, bytes]:
    session = store.acquire(session_id, owner)
    copy = store.checkout(session)
    try:
        return {str(p.relative_to(copy)): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    finally:
        store.finish(session, copy, keep=False)


def test_a_finished_run_commits_a_new_generation_and_a_stopped_one_changes_nothing(store: SessionStore) -> None:
    session = store.create("me")
    store.finish(session, store.checkout(session), keep=True)
    _run(store, session.id, "me", {"a.txt": b"one", "d/b.txt": b"two"}, keep=True)
    _run(store, session.id, "me", {"a.txt": b"half-writ"}, keep=False)  # stopped mid-write
    assert _files(store, session.id, "me") == {"a.txt": b"one", "d/b.txt": b"two"}
    directory = store.root / session.id
    assert sorted(p.name for p in directory.iterdir()) == ["gen-2", "lock", "owner", "used"]  # one generation


def test_a_run_works_in_a_private_copy_off_the_shared_directory(store: SessionStore) -> None:
    session = store.create(None)
    store.finish(session, None, keep=False)
    _run(store, session.id, None, {"a.txt": b"kept"}, keep=True)
    session = store.acquire(session.id, None)
    workspace = store.checkout(session)
    assert store.root not in workspace.parents and (workspace / "a.txt").read_bytes() == b"kept"
    (workspace / "a.txt").write_bytes(b"changed")
    store.finish(session, workspace, keep=False)
    assert not workspace.exists()
    assert _files(store, session.id, None) == {"a.txt": b"kept"}


def test_symlinks_are_not_carried_to_the_next_run(store: SessionStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    session = store.create(None)
    workspace = store.checkout(session)
    os.symlink(str(outside), workspace / "escape")
    (workspace / "real.txt").write_text("x")
    store.finish(session, workspace, keep=True)
    session = store.acquire(session.id, None)
    copy = store.checkout(session)
    assert sorted(p.name for p in copy.iterdir()) == ["real.txt"]
    store.finish(session, copy, keep=False)
    assert outside.read_text() == "host file"


def test_two_runs_of_one_session_never_overlap(store: SessionStore) -> None:
    session = store.create("me")  # reserved for its first run
    with pytest.raises(SessionBusy, match="retry when that call has returned"):
        store.acquire(session.id, "me")
    store.finish(session, None, keep=False)
    store.finish(store.acquire(session.id, "me"), None, keep=False)


def test_two_stores_on_one_directory_serve_each_others_sessions_one_run_at_a_time(tmp_path: Path, clock: Clock) -> None:
    a, b = _store(tmp_path / "s", clock), _store(tmp_path / "s", clock)
    session = a.create("me")
    _ = b  # b never saw the session being made
    workspace = a.checkout(session)
    (workspace / "notes.txt").write_text("from a")
    with pytest.raises(SessionBusy):
        b.acquire(session.id, "me")  # a holds its lock for the length of the run
    a.finish(session, workspace, keep=True)
    assert _files(b, session.id, "me") == {"notes.txt": b"from a"}
    with pytest.raises(UnknownSession):
        b.acquire(session.id, "someone else")
    held = b.acquire(session.id, "me")
    with pytest.raises(SessionBusy):
        a.acquire(session.id, "me")
    b.finish(held, None, keep=False)
    assert len(a) == len(b) == 1


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


def test_a_session_in_use_never_expires_even_from_another_store(store: SessionStore, clock: Clock) -> None:
    session = store.create(None)
    clock.now += 3600
    store.expire()
    other = _store(store.root, clock)  # another replica sees it expired, but cannot take its lock
    other.expire()
    assert (store.root / session.id).exists()
    store.finish(session, None, keep=False)
    store.finish(other.acquire(session.id, None), None, keep=False)


def test_the_number_of_sessions_is_capped_over_every_store_on_the_directory(store: SessionStore, clock: Clock) -> None:
    other = _store(store.root, clock)
    for each in (store, other, store):
        each.finish(each.create(None), None, keep=False)
    for each in (store, other):
        with pytest.raises(SessionError, match="already holds 3 sessions"):
            each.create(None)


def test_a_run_that_would_pass_the_byte_cap_keeps_the_earlier_files(store: SessionStore) -> None:
    session = store.create(None)
    store.finish(session, None, keep=False)
    _run(store, session.id, None, {"a": b"1"}, keep=True)
    warning = _run(store, session.id, None, {"big": b"x" * (2 * 1024 * 1024)}, keep=True)
    assert warning is not None and "were not kept" in warning
    assert _files(store, session.id, None) == {"a": b"1"}


def test_a_process_that_dies_mid_run_leaves_the_session_usable_at_its_last_generation(
    tmp_path: Path, clock: Clock
) -> None:
    dead = _store(tmp_path / "s", clock)
    session = dead.create("stdio")
    workspace = dead.checkout(session)
    (workspace / "a.txt").write_text("kept")
    dead.finish(session, workspace, keep=True)
    running = dead.acquire(session.id, "stdio")  # a run in the middle when the process died ...
    (session.directory / "gen-2.part-0000").write_bytes(b"half a commit")  # ... in the middle of a commit
    os.close(running.lock_fd)  # the process dies: its lock goes with it
    alive = _store(tmp_path / "s", clock)
    taken = alive.acquire(session.id, "stdio")
    assert (alive.checkout(taken) / "a.txt").read_text() == "kept"
    assert not (session.directory / "gen-2.part-0000").exists()
    alive.finish(taken, None, keep=False)


def test_broken_or_expired_sessions_are_removed_by_any_store(tmp_path: Path, clock: Clock) -> None:
    half_made = tmp_path / "s" / (".new-" + "A" * 43)
    half_made.mkdir(parents=True)
    os.utime(half_made, (0, 0))
    old = _store(tmp_path / "s", clock)
    expired = old.create(None)
    old.finish(expired, None, keep=False)
    clock.now += 61
    _store(tmp_path / "s", clock)
    assert not half_made.exists() and not expired.directory.exists()


def test_sealed_files_changed_on_disk_are_refused_with_a_clear_error(store: SessionStore) -> None:
    session = store.create("me")
    _run_files = store.checkout(session)
    (_run_files / "secret.txt").write_text("alice@example.com")
    store.finish(session, _run_files, keep=True)
    generation = store.root / session.id / "gen-1"
    sealed = bytearray(generation.read_bytes())
    assert b"alice@example.com" not in sealed
    sealed[-5] ^= 1
    generation.write_bytes(bytes(sealed))
    held = store.acquire(session.id, "me")
    with pytest.raises(DamagedSession, match="cannot be opened: changed on disk"):
        store.checkout(held)
    store.finish(held, None, keep=False)
    (store.root / session.id / "owner").write_bytes(b"me")  # a forged owner file
    with pytest.raises(DamagedSession, match="stored owner"):
        store.acquire(session.id, "me")


def test_another_state_key_opens_nothing(tmp_path: Path, clock: Clock) -> None:
    store = _store(tmp_path / "s", clock)
    session = store.create("me")
    store.finish(session, None, keep=False)
    other = SessionStore(tmp_path / "s", key=StateKey(b"o" * 32, source="other"), timer=clock)
    with pytest.raises(DamagedSession, match="same --state-key-file"):
        other.acquire(session.id, "me")


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


def test_what_the_server_keeps_with_a_session_lives_as_long_as_it_does(tmp_path: Path, clock: Clock) -> None:
    store = _store(tmp_path / "sessions", clock, ttl_s=3)
    session = store.create("me")
    store.write_extra(session, "vault", b"tokens")
    store.finish(session, None, keep=False)
    for _ in range(5):  # a use every second, for longer than the TTL: the same value, from any store
        clock.now += 1
        again = _store(tmp_path / "sessions", clock, ttl_s=3).acquire(session.id, "me")
        assert store.read_extra(again, "vault") == b"tokens"
        store.finish(again, None, keep=False)
    clock.now += 3.5
    with pytest.raises(UnknownSession):
        store.acquire(session.id, "me")
    fresh = store.create("me")
    assert store.read_extra(fresh, "vault") is None


def test_ending_a_session_is_idempotent_and_frees_it_at_once(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions", max_sessions=1)
    session = store.create("me")
    store.finish(session, None, keep=False)
    assert not store.end(session.id, "other")  # another caller's looks unknown, and stays
    assert store.end(session.id, "me") and not session.directory.exists() and len(store) == 0
    assert not store.end(session.id, "me")
    store.create("me")  # the slot is free
