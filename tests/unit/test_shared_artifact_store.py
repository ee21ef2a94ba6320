"""The shared artifact store: sealed on disk, owned, listed and read by any store on the directory, bounded."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from wasmexec._envelope import Artifact
from wasmexec._state.key import StateKey
from wasmexec._state.shared_artifacts import SharedArtifactStore

KEY = StateKey(b"a" * 32, source="test")


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def _workspace(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, list[Artifact]]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    artifacts: list[Artifact] = []
    for name, data in files.items():
        (workspace / name).write_bytes(data)
        artifacts.append({"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                          "mime_type": "text/plain"})  # type: ignore[typeddict-item]  # fmt: skip
    return workspace, artifacts


def test_another_store_on_the_directory_lists_and_reads_an_owners_artifacts(tmp_path: Path) -> None:
    a, b = SharedArtifactStore(tmp_path / "art", KEY), SharedArtifactStore(tmp_path / "art", KEY)
    workspace, artifacts = _workspace(tmp_path, {"x.txt": b"secret text", "y.txt": b"more"})
    kept = a.put("run1", workspace, artifacts)
    assert {k.path for k in kept} == {"x.txt", "y.txt"}
    assert b.runs_of("me") == [] and not b.owned_by("run1", None)  # nobody owns it until the result is built
    a.set_owner("run1", "me")
    assert b.runs_of("me") == ["run1"] and not b.owned_by("run1", "you")
    assert b.read("run1", "x.txt") == b"secret text"
    assert {artifact.path for artifact in b.list(["run1"])} == {"x.txt", "y.txt"}
    assert not any(b"secret text" in p.read_bytes() or b"x.txt" in p.read_bytes()
                   for p in (tmp_path / "art").rglob("*") if p.is_file())  # fmt: skip


def test_a_changed_sealed_file_reads_as_missing(tmp_path: Path) -> None:
    store = SharedArtifactStore(tmp_path / "art", KEY)
    workspace, artifacts = _workspace(tmp_path, {"x.txt": b"data"})
    store.put("run1", workspace, artifacts)
    sealed = tmp_path / "art" / "run1" / artifacts[0]["sha256"]
    sealed.write_bytes(sealed.read_bytes()[:-1] + b"\x00")
    with pytest.raises(KeyError, match="does not open"):
        store.read("run1", "x.txt")
    other = SharedArtifactStore(tmp_path / "art", StateKey(b"o" * 32, source="other"))
    with pytest.raises(KeyError):
        other.get("run1", "x.txt")


def test_retention_counts_the_whole_directory_and_drops_the_oldest_and_expired(tmp_path: Path) -> None:
    clock = Clock()
    a = SharedArtifactStore(tmp_path / "art", KEY, max_artifacts=2, max_age_s=100, timer=clock)
    b = SharedArtifactStore(tmp_path / "art", KEY, max_artifacts=2, max_age_s=100, timer=clock)
    for number, store in enumerate((a, b, a)):
        clock.now += 1
        workspace, artifacts = _workspace(tmp_path, {f"{number}.txt": str(number).encode()})
        store.put(f"run{number}", workspace, artifacts)
    assert sorted(artifact.run_id for artifact in b.list()) == ["run1", "run2"]  # run0 was least recently used
    clock.now += 101
    assert a.list() == [] and not any((tmp_path / "art").glob("run*"))
