"""Compiled artifacts are native code: only files that you (or root) alone could have written are loaded.

Each test lays out a cache directory with a tiny *genuine* component (so compiling it takes
milliseconds) and plants a valid compiled artifact of a different tiny component, with the
best record an attacker could write, where wasmexec might look for it. The proof is in what
`load_compiled` returns: the genuine component (`genuine` export), never the planted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime
from wasmtime.component import Component

from wasmexec import BuildError
from wasmexec._sandbox.component_builder import component_store
from wasmexec._sandbox.image_cache import CompiledImageCache
from wasmexec._sandbox.runtime import engine_key, make_engine

#: A user id that is not ours, for simulating another local user (needs root to chown).
OTHER_UID = 65534
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="making a file owned by another user needs root")

_TINY = """(component
  (core module $m (func (export "f")))
  (core instance $i (instantiate $m))
  (func $f (canon lift (core func $i "f")))
  (export "%s" (func $f)))"""


def _component(export: str) -> bytes:
    return bytes(wasmtime.wat2wasm(_TINY % export))


GENUINE = _component("genuine")
GENUINE_SHA256 = hashlib.sha256(GENUINE).hexdigest()
ENGINE = make_engine(False)
KEY = engine_key(False)


def _exports(component: object) -> list[str]:
    return list(component.type.exports(ENGINE))  # type: ignore[attr-defined]


@pytest.fixture
def shared_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The machine's shared temp dir, where the fallback cache lives."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    yield shared


@pytest.fixture
def default_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A per-user cache home of our own, so that `component_store()` uses its default directory."""
    home = tmp_path / "home-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def _genuine_build(store: CompiledImageCache, directory: Path | None = None) -> Path:
    """Writes a complete build (manifest + component, no compiled form) into the store's directory."""
    directory = directory or store.directory
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    store._component_path(directory).write_bytes(GENUINE)
    manifest = {"sandbox_image": store.image, "component_sha256": GENUINE_SHA256}
    store._manifest_path(directory).write_text(json.dumps(manifest))
    return directory


def _plant(directory: Path, store: CompiledImageCache, *, record: dict[str, object] | None = None) -> Path:
    """Writes a valid compiled artifact of another component under the expected name, with a record."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / store.compiled_name(store.image, KEY)
    data = bytes(Component(ENGINE, _component("planted")).serialize())
    path.write_bytes(data)
    path.chmod(0o644)
    written = {
        "component_sha256": GENUINE_SHA256,
        "engine_key": KEY,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "mtime_ns": path.stat().st_mtime_ns,
    }
    Path(f"{path}.json").write_text(json.dumps(written | (record or {})))
    return path


def _fallback(shared: Path) -> Path:
    return shared / f"wasmexec-cache-{os.geteuid()}"


# -- the shared temp dir --------------------------------------------------------------------


def test_an_explicit_cache_dir_never_reads_compiled_code_from_the_shared_temp_dir(
    tmp_path: Path, shared_tmp: Path
) -> None:
    store = component_store(tmp_path / "cache")
    _genuine_build(store)
    fallback = _fallback(shared_tmp)
    fallback.mkdir(mode=0o700)
    _plant(fallback, store)
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]


def _world_writable(directory: Path) -> None:
    directory.mkdir()
    directory.chmod(0o777)


def _group_writable(directory: Path) -> None:
    directory.mkdir()
    directory.chmod(0o770)


def _owned_by_another_user(directory: Path) -> None:
    directory.mkdir(mode=0o700)
    os.chown(directory, OTHER_UID, OTHER_UID)


def _symlink_to_a_private_dir(directory: Path) -> None:
    target = directory.parent / "elsewhere"
    target.mkdir(mode=0o700)
    directory.symlink_to(target)


SQUATTED = [
    pytest.param(_world_writable, id="world-writable"),
    pytest.param(_group_writable, id="group-writable"),
    pytest.param(_owned_by_another_user, id="another-owner", marks=needs_root),
    pytest.param(_symlink_to_a_private_dir, id="symlink"),
]


@pytest.mark.parametrize("squat", SQUATTED)
def test_compiled_code_in_a_fallback_dir_someone_else_could_write_is_never_loaded(
    squat: object, default_home: Path, shared_tmp: Path
) -> None:
    store = component_store()
    _genuine_build(store)
    fallback = _fallback(shared_tmp)
    squat(fallback)  # type: ignore[operator]
    _plant(fallback, store)
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]


@pytest.mark.parametrize("squat", SQUATTED)
def test_a_fallback_dir_someone_else_could_write_is_refused_with_a_build_error(
    squat: object, default_home: Path, shared_tmp: Path
) -> None:
    default_home.write_text("a file, so the default cache dir cannot be created")
    fallback = _fallback(shared_tmp)
    squat(fallback)  # type: ignore[operator]
    store = component_store()
    with pytest.raises(BuildError, match=str(fallback)), pytest.warns(RuntimeWarning):
        store.writable_directory()
    assert not any(fallback.iterdir())


def test_the_fallback_dir_is_created_private_to_you(default_home: Path, shared_tmp: Path) -> None:
    default_home.write_text("a file, so the default cache dir cannot be created")
    store = component_store()
    with pytest.warns(RuntimeWarning, match=str(_fallback(shared_tmp))):
        used = store.writable_directory()
    assert used == _fallback(shared_tmp)
    info = os.lstat(used)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) == 0o700


# -- the cache directory itself ---------------------------------------------------------------


@pytest.mark.parametrize(
    "squat",
    [
        pytest.param(lambda path: path.chmod(0o777), id="world-writable"),
        pytest.param(lambda path: path.chmod(0o1777), id="world-writable-sticky"),
        pytest.param(lambda path: os.chown(path, OTHER_UID, OTHER_UID), id="another-owner", marks=needs_root),
    ],
)
def test_a_cache_dir_someone_else_could_write_is_refused_not_loaded(squat: object, tmp_path: Path) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    _plant(directory, store)
    squat(directory)  # type: ignore[operator]
    with pytest.raises(BuildError, match=str(directory)):
        store.load_compiled(ENGINE, KEY)


@needs_root
def test_a_symlinked_cache_dir_is_judged_by_the_directory_it_points_to(tmp_path: Path) -> None:
    real = tmp_path / "theirs"
    store = component_store(real)
    _genuine_build(store)
    _plant(real, store)
    os.chown(real, OTHER_UID, OTHER_UID)
    link = tmp_path / "cache"
    link.symlink_to(real)
    with pytest.raises(BuildError, match="owned by uid"):
        component_store(link).load_compiled(ENGINE, KEY)


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o664], ids=oct)
def test_a_compiled_file_others_could_write_is_recompiled_not_loaded(mode: int, tmp_path: Path) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    _plant(directory, store).chmod(mode)
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]


@needs_root
def test_a_compiled_file_owned_by_another_user_is_recompiled_not_loaded(tmp_path: Path) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    os.chown(_plant(directory, store), OTHER_UID, OTHER_UID)
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]


def test_a_symlinked_compiled_file_is_recompiled_not_loaded(tmp_path: Path) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    planted = _plant(tmp_path / "elsewhere", store)
    name = store.compiled_name(store.image, KEY)
    (directory / name).symlink_to(planted)
    (directory / f"{name}.json").symlink_to(f"{planted}.json")
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]


# -- binding a compiled file to its component ----------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        pytest.param({"component_sha256": "0" * 64}, id="another-component"),
        pytest.param({"engine_key": "wasmtime0.0.0-v0-fuel"}, id="another-engine"),
        pytest.param({"sha256": "0" * 64, "size": 1}, id="changed-after-compiling"),
        pytest.param({"sha256": "0" * 64, "mtime_ns": 1}, id="changed-with-the-same-size"),
    ],
)
def test_a_compiled_file_whose_record_does_not_match_is_recompiled_not_loaded(
    record: dict[str, object], tmp_path: Path
) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    _plant(directory, store, record=record)
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]


def test_a_compiled_file_without_a_record_is_recompiled_not_loaded(tmp_path: Path) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    Path(f"{_plant(directory, store)}.json").unlink()
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]


def test_a_recompiled_artifact_is_recorded_and_loaded_by_the_next_process(tmp_path: Path) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    _plant(directory, store, record={"component_sha256": "0" * 64})
    store.load_compiled(ENGINE, KEY)
    progress: list[str] = []
    again = component_store(directory, progress=progress.append)
    assert _exports(again.load_compiled(ENGINE, KEY)) == ["genuine"]
    assert progress == []  # deserialized, not compiled
    record = json.loads(Path(f"{directory / store.compiled_name(store.image, KEY)}.json").read_text())
    assert record["component_sha256"] == GENUINE_SHA256 and record["engine_key"] == KEY


def test_a_compiled_file_with_a_new_mtime_and_the_same_bytes_is_loaded_and_its_record_updated(tmp_path: Path) -> None:
    # A copied or unpacked cache gets new mtimes: the file is checked by its sha256 once, then by its mtime.
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    store.load_compiled(ENGINE, KEY)  # compiled and recorded
    path = directory / store.compiled_name(store.image, KEY)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    progress: list[str] = []
    again = component_store(directory, progress=progress.append)
    assert _exports(again.load_compiled(ENGINE, KEY)) == ["genuine"]
    assert progress == []  # deserialized, not compiled
    record = json.loads(Path(f"{path}.json").read_text())
    assert record["mtime_ns"] == 1_000_000_000 and record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_changed_compiled_file_does_not_get_its_record_updated(tmp_path: Path) -> None:
    store = component_store(tmp_path / "cache")
    directory = _genuine_build(store)
    planted = _plant(directory, store, record={"sha256": "0" * 64, "mtime_ns": 1})
    assert _exports(store.load_compiled(ENGINE, KEY)) == ["genuine"]  # recompiled
    record = json.loads(Path(f"{planted}.json").read_text())
    assert record["sha256"] == hashlib.sha256(planted.read_bytes()).hexdigest()  # the recompiled file's own record
