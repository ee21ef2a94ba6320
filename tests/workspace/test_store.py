"""ArtifactStore: the bytes of finished runs' artifacts, kept within bounds, read by run id and path."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from wasmexec import ArtifactStore
from wasmexec._envelope import Artifact


def _artifact(workspace: Path, path: str, data: bytes) -> Artifact:
    target = workspace / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "mime_type": "text/plain"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_artifact_reads_back_by_run_id_and_path(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    (tmp_path / "store").mkdir()
    artifact = _artifact(tmp_path / "ws", "out/a.txt", b"hello")
    kept = store.put("run1", tmp_path / "ws", [artifact])
    assert [(a.run_id, a.path, a.size) for a in kept] == [("run1", "out/a.txt", 5)]
    assert store.read("run1", "out/a.txt") == b"hello"
    assert store.file_path("run1", "out/a.txt").read_bytes() == b"hello"
    assert [a.path for a in store.list(["run1"])] == ["out/a.txt"]
    assert store.list(["other"]) == []
    with pytest.raises(KeyError):
        store.read("run1", "missing")
    with pytest.raises(KeyError):
        store.read("run2", "out/a.txt")


def test_moving_takes_the_file_out_of_the_workspace(tmp_path: Path) -> None:
    store = ArtifactStore()
    artifact = _artifact(tmp_path, "a.bin", b"\x00" * 10)
    store.put("run1", tmp_path, [artifact], move=True)
    assert not (tmp_path / "a.bin").exists()
    assert store.read("run1", "a.bin") == b"\x00" * 10
    store.close()


def test_a_file_that_changed_since_it_was_listed_is_not_kept(tmp_path: Path) -> None:
    store = ArtifactStore()
    artifact = _artifact(tmp_path, "a.txt", b"listed")
    (tmp_path / "a.txt").write_bytes(b"swappd")  # same size, other content
    assert store.put("run1", tmp_path, [artifact]) == []
    with pytest.raises(KeyError):
        store.read("run1", "a.txt")


def test_a_symlink_named_as_an_artifact_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"top secret")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").symlink_to(secret)
    forged: Artifact = {"path": "a.txt", "size": 10, "sha256": hashlib.sha256(b"top secret").hexdigest(),
                        "mime_type": "text/plain"}  # fmt: skip
    store = ArtifactStore()
    assert store.put("run1", workspace, [forged], move=True) == []
    assert secret.read_bytes() == b"top secret"


def test_the_least_recently_used_run_is_evicted_first_past_the_count_bound(tmp_path: Path) -> None:
    store = ArtifactStore(max_artifacts=2)
    for run in ("r1", "r2"):
        store.put(run, tmp_path, [_artifact(tmp_path, f"{run}.txt", run.encode())])
    store.read("r1", "r1.txt")  # r1 is now the most recently used
    store.put("r3", tmp_path, [_artifact(tmp_path, "r3.txt", b"r3")])
    assert sorted(a.run_id for a in store.list()) == ["r1", "r3"]


def test_the_byte_bound_evicts_and_a_run_larger_than_it_is_not_kept(tmp_path: Path) -> None:
    store = ArtifactStore(max_bytes=10)
    store.put("r1", tmp_path, [_artifact(tmp_path, "a", b"123456")])
    store.put("r2", tmp_path, [_artifact(tmp_path, "b", b"123456")])
    assert [a.run_id for a in store.list()] == ["r2"]
    assert store.put("r3", tmp_path, [_artifact(tmp_path, "c", b"x" * 11)]) == []
    assert [a.run_id for a in store.list()] == ["r2"]


def test_artifacts_expire_after_their_age_bound(tmp_path: Path) -> None:
    clock = Clock()
    store = ArtifactStore(max_age_s=60, timer=clock)
    store.put("r1", tmp_path, [_artifact(tmp_path, "a", b"1")])
    clock.now += 30
    store.put("r2", tmp_path, [_artifact(tmp_path, "b", b"2")])
    clock.now += 31
    assert [a.run_id for a in store.list()] == ["r2"]
    with pytest.raises(KeyError):
        store.read("r1", "a")


def test_forget_drops_a_run(tmp_path: Path) -> None:
    store = ArtifactStore()
    store.put("r1", tmp_path, [_artifact(tmp_path, "a", b"1")])
    store.forget("r1")
    store.forget("r1")
    assert store.list() == []


@pytest.mark.parametrize("run_id", ["", "../x", "a/b", "x" * 129])
def test_a_run_id_that_could_be_a_path_is_refused(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(ValueError):
        ArtifactStore().put(run_id, tmp_path, [_artifact(tmp_path, "a", b"1")])
