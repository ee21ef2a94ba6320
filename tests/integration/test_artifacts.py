"""Building, caching and shipping the compiled component."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import data_of
from wasmexec import Runtime, Sandbox
from wasmexec._sandbox.artifacts import ArtifactStore


def test_build_output_writes_a_directory_that_runs_read_only(runtime: Runtime, tmp_path: Path) -> None:
    shipped = tmp_path / "artifacts"
    written = runtime.build(shipped)
    names = sorted(path.name for path in written)
    assert any(name.endswith("-fuel.cwasm") for name in names)
    assert any(name.endswith("-nofuel.cwasm") for name in names)
    assert any(name.endswith(".wasm") for name in names) and any(name.endswith(".json") for name in names)
    for path in shipped.iterdir():
        path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    shipped.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        before = sorted(os.listdir(shipped))
        done = subprocess.run(
            [sys.executable, "-m", "wasmexec", "run", "--cache-dir", str(shipped), "-c", "result = 'shipped'"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert '"data":"shipped"' in done.stdout
        assert "warning" not in done.stderr  # nothing had to be written
        assert sorted(os.listdir(shipped)) == before
    finally:
        shipped.chmod(stat.S_IRWXU)


def test_later_processes_only_deserialize(runtime: Runtime) -> None:
    progress: list[str] = []
    fresh = Runtime(runtime.artifacts.directory, progress=progress.append)
    assert data_of(Sandbox(runtime=fresh).run_sync("result = 1")) == 1
    assert progress == []  # no build, no compile


def test_an_unwritable_cache_dir_falls_back_to_a_temp_dir_with_a_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    unwritable = blocker / "cache"  # cannot be created, even by root
    store = ArtifactStore(unwritable)
    with pytest.warns(RuntimeWarning, match="not writable"):
        fallback = store._writable_directory()
    assert fallback == store.directory != unwritable
    assert os.access(fallback, os.W_OK)


def test_a_damaged_compiled_artifact_is_recompiled_not_fatal(runtime: Runtime, tmp_path: Path) -> None:
    runtime.build(tmp_path)
    for path in tmp_path.glob("*-nofuel.cwasm"):
        path.write_bytes(b"garbage")
    progress: list[str] = []
    fresh = Runtime(tmp_path, progress=progress.append)
    from wasmexec import Limits

    assert data_of(Sandbox(Limits(fuel=None), runtime=fresh).run_sync("result = 2")) == 2
    assert any("ignoring unusable compiled artifact" in line for line in progress)
    assert any("compiled in" in line for line in progress)


def test_the_sandbox_image_is_the_sha256_of_the_component(runtime: Runtime) -> None:
    import hashlib

    wasm = runtime.artifacts.component_bytes()
    assert runtime.sandbox_image == "sha256:" + hashlib.sha256(wasm).hexdigest()


def test_old_builds_are_pruned_from_the_cache_and_the_current_one_kept(runtime: Runtime, tmp_path: Path) -> None:
    import json
    import os

    from wasmexec._sandbox.artifacts import KEEP_IMAGES, _prune

    for index in range(KEEP_IMAGES + 2):
        image = f"{index:032x}"
        (tmp_path / f"guest-{index}.json").write_text(json.dumps({"sandbox_image": "sha256:" + image}))
        (tmp_path / f"guest-{index}.wasm").write_bytes(b"x")
        (tmp_path / f"{image}-wasmtime-v1-fuel.cwasm").write_bytes(b"x")
        os.utime(tmp_path / f"guest-{index}.json", (index, index))  # older index, older build
    (tmp_path / f"{'f' * 32}-orphan.cwasm").write_bytes(b"x")
    _prune(tmp_path, KEEP_IMAGES)
    kept = sorted(path.name for path in tmp_path.glob("guest-*.json"))
    assert kept == [f"guest-{i}.json" for i in range(2, KEEP_IMAGES + 2)]
    assert sorted(p.name[:32] for p in tmp_path.glob("*.cwasm")) == [f"{i:032x}" for i in range(2, KEEP_IMAGES + 2)]
    assert not (tmp_path / "guest-0.wasm").exists()
