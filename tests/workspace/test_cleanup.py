"""What a stopping server leaves in the temp dir: nothing of the artifact store or the run-directory pool."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import pytest

from wasmexec._workspace.rundir_pool import RunDirPool
from wasmexec._workspace.store import ArtifactStore


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def test_closing_the_store_removes_the_directory_it_made_and_a_later_put_makes_a_new_one(
    tmp_path: Path, temp_dir: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "out.txt").write_bytes(b"data")
    artifact = {"path": "out.txt", "size": 4, "sha256": hashlib.sha256(b"data").hexdigest(), "mime_type": "text/plain"}
    store = ArtifactStore()
    assert store.put("run1", workspace, [artifact])  # type: ignore[list-item]
    assert any(temp_dir.iterdir())
    store.close()
    assert list(temp_dir.iterdir()) == []
    store.close()  # idempotent
    assert store.put("run2", workspace, [artifact])  # type: ignore[list-item]
    assert store.read("run2", "out.txt") == b"data"
    store.close()
    assert list(temp_dir.iterdir()) == []


def test_removing_the_pool_removes_released_and_spare_directories_and_its_base(temp_dir: Path) -> None:
    pool = RunDirPool(spares=2)
    used = pool.take()
    (used.tmp / "scratch").write_bytes(b"x")
    pool.release(used)
    pool.remove()
    assert list(temp_dir.iterdir()) == []
    pool.remove()  # idempotent


def test_a_given_base_is_emptied_but_kept(tmp_path: Path) -> None:
    base = tmp_path / "runs"
    base.mkdir()
    pool = RunDirPool(base, spares=1)
    pool.release(pool.take())
    pool.remove()
    assert base.is_dir() and list(base.iterdir()) == []


def test_a_pool_told_to_keep_none_ready_makes_no_spares_and_removes_those_it_had(tmp_path: Path) -> None:
    base = tmp_path / "runs"
    base.mkdir()
    pool = RunDirPool(base, spares=2)
    pool.release(pool.take())
    assert pool.wait_idle()
    assert len(list(base.iterdir())) == 2  # the spares made after the first take
    pool.keep(0)
    assert list(base.iterdir()) == []
    used = pool.take()
    pool.release(used)
    assert pool.wait_idle()
    assert list(base.iterdir()) == []
