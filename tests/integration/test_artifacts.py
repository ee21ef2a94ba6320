"""Building, caching and shipping the compiled component."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import data_of
from tests.security.test_artifact_trust import ENGINE, GENUINE_SHA256, KEY, _exports, _genuine_build
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._sandbox.assets import guest_sources
from wasmexec._sandbox.component_builder import KEEP_IMAGES, _prune, component_store


def _wasmexec(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wasmexec", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


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
        for extra in ([], ["--no-fuel"]):
            done = _wasmexec("run", "--cache-dir", str(shipped), *extra, "-c", "result = 'shipped'")
            assert done.returncode == 0, done.stderr
            assert '"data":"shipped"' in done.stdout
            assert "warning" not in done.stderr and "compil" not in done.stderr  # nothing had to be written
        assert sorted(os.listdir(shipped)) == before  # not even a lock file, though root could write one
    finally:
        shipped.chmod(stat.S_IRWXU)


def test_later_processes_only_deserialize(runtime: Runtime) -> None:
    progress: list[str] = []
    fresh = Runtime(runtime.artifacts.directory, progress=progress.append)
    assert data_of(Sandbox(runtime=fresh).run_sync("result = 1")) == 1
    assert progress == []  # no build, no compile


@pytest.mark.parametrize("how", ["--cache-dir", "WASMEXEC_CACHE_DIR"])
def test_the_cli_exits_3_at_once_when_the_cache_dir_cannot_be_created(how: str, tmp_path: Path) -> None:
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    env = {"TMPDIR": str(shared_tmp)}
    option = ["--cache-dir", "/dev/null/x"] if how == "--cache-dir" else []
    if how == "WASMEXEC_CACHE_DIR":
        env["WASMEXEC_CACHE_DIR"] = "/dev/null/x"
    started = time.monotonic()
    done = _wasmexec("run", *option, "-c", "result = 1", env=env)
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 15  # a build takes 15-60 s; an interpreter start ~1 s
    assert "/dev/null/x" in done.stderr and "--cache-dir" in done.stderr
    assert "Traceback" not in done.stderr and "building" not in done.stderr
    assert not any(shared_tmp.iterdir())  # nothing built elsewhere


def test_an_unwritable_default_cache_dir_falls_back_to_a_private_temp_dir_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the default dir cannot be created, even by root
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store = component_store()
    with pytest.warns(RuntimeWarning, match="cannot be created"):
        fallback = store.writable_directory()
    assert fallback == store.directory == tmp_path / f"wasmexec-cache-{os.geteuid()}"
    assert stat.S_IMODE(fallback.stat().st_mode) == 0o700


def test_a_damaged_compiled_artifact_is_recompiled_not_fatal(runtime: Runtime, tmp_path: Path) -> None:
    runtime.build(tmp_path)
    for path in tmp_path.glob("*-nofuel.cwasm"):
        path.write_bytes(b"garbage")
    progress: list[str] = []
    fresh = Runtime(tmp_path, progress=progress.append)
    assert data_of(Sandbox(Limits(fuel=None), runtime=fresh).run_sync("result = 2")) == 2
    assert any("ignoring unusable compiled artifact" in line for line in progress)
    assert any("compiled in" in line for line in progress)


def test_the_sandbox_image_names_the_sources_and_the_manifest_records_the_component(runtime: Runtime) -> None:
    assert runtime.sandbox_image == "sha256:" + guest_sources().identity()
    directory = runtime.artifacts.directory
    manifest = json.loads(runtime.artifacts._manifest_path(directory).read_text())
    assert manifest["sandbox_image"] == runtime.sandbox_image
    assert manifest["component_sha256"] == hashlib.sha256(runtime.artifacts.component_bytes()).hexdigest()


@pytest.mark.slow
def test_two_builds_of_the_same_sources_in_two_directories_have_the_same_sandbox_image(
    runtime: Runtime, tmp_path: Path
) -> None:
    images = [component_store(tmp_path / name).sandbox_image() for name in ("one", "two")]
    assert images == [runtime.sandbox_image, runtime.sandbox_image]
    for name in ("one", "two"):
        store = component_store(tmp_path / name)
        manifest = json.loads(store._manifest_path(store.directory).read_text())
        assert manifest["component_sha256"] == hashlib.sha256(store.component_bytes()).hexdigest()


def test_old_builds_are_pruned_from_the_cache_and_the_current_one_kept(tmp_path: Path) -> None:
    for index in range(KEEP_IMAGES + 2):
        image = f"{index:032x}"
        (tmp_path / f"guest-{index}.json").write_text(json.dumps({"sandbox_image": "sha256:" + image}))
        (tmp_path / f"guest-{index}.wasm").write_bytes(b"x")
        (tmp_path / f"{image}-wasmtime-v1-fuel.cwasm").write_bytes(b"x")
        (tmp_path / f"{image}-wasmtime-v1-fuel.cwasm.json").write_bytes(b"{}")
        os.utime(tmp_path / f"guest-{index}.json", (index, index))  # older index, older build
    (tmp_path / f"{'f' * 32}-orphan.cwasm").write_bytes(b"x")
    (tmp_path / f"{'f' * 32}-orphan.cwasm.json").write_bytes(b"{}")
    _prune(tmp_path, KEEP_IMAGES)
    kept = sorted(path.name for path in tmp_path.glob("guest-*.json"))
    assert kept == [f"guest-{i}.json" for i in range(2, KEEP_IMAGES + 2)]
    expected = [f"{i:032x}" for i in range(2, KEEP_IMAGES + 2)]
    assert sorted(p.name[:32] for p in tmp_path.glob("*.cwasm")) == expected
    assert sorted(p.name[:32] for p in tmp_path.glob("*.cwasm.json")) == expected
    assert not (tmp_path / "guest-0.wasm").exists()


_LOAD = """
import sys
from pathlib import Path
from wasmexec._sandbox.component_builder import component_store
from wasmexec._sandbox.runtime import engine_key, make_engine
engine = make_engine(False)
print(*component_store(Path(sys.argv[1])).load_compiled(engine, engine_key(False)).type.exports(engine))
"""


def test_processes_compiling_at_once_all_get_the_component_and_leave_one_recorded_artifact(
    runtime: Runtime, tmp_path: Path
) -> None:
    directory = _genuine_build(component_store(tmp_path / "cache"))
    processes = [
        subprocess.Popen([sys.executable, "-c", _LOAD, str(directory)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    assert [process.communicate(timeout=120)[0].strip() for process in processes] == ["genuine"] * 4
    compiled = sorted(directory.glob("*.cwasm"))
    assert len(compiled) == 1
    record = json.loads(Path(f"{compiled[0]}.json").read_text())
    assert record["component_sha256"] == GENUINE_SHA256
    assert record["sha256"] == hashlib.sha256(compiled[0].read_bytes()).hexdigest()
    assert _exports(component_store(directory).load_compiled(ENGINE, KEY)) == ["genuine"]


def test_the_default_caches_private_fallback_is_reused_by_later_processes(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fallback = tmp_path / f"wasmexec-cache-{os.geteuid()}"
    fallback.mkdir(mode=0o700)
    _genuine_build(component_store(), fallback)
    with pytest.warns(RuntimeWarning, match="using"):
        assert _exports(component_store().load_compiled(ENGINE, KEY)) == ["genuine"]
    progress: list[str] = []
    assert _exports(component_store(progress=progress.append).load_compiled(ENGINE, KEY)) == ["genuine"]
    assert progress == []  # found and deserialized there, no warning, no compile
