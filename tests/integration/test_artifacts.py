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
from wasmexec._artifacts import ArtifactStore


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
