"""What names a build (the sandbox image) and how a cache directory that cannot be used fails."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from wasmexec import BuildError
from wasmexec._sandbox import assets
from wasmexec._sandbox.assets import GuestSources, guest_sources
from wasmexec._sandbox.component_builder import component_store


def _copy_of_the_sources(target: Path) -> GuestSources:
    sources = guest_sources()
    shutil.copytree(sources.bridge_dir, target / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(sources.wit_dir, target / "wit")
    return GuestSources(target / "bridge", target / "wit")


def test_the_sandbox_image_is_the_same_for_the_same_sources_wherever_they_are(tmp_path: Path) -> None:
    copy = _copy_of_the_sources(tmp_path / "elsewhere")
    (copy.bridge_dir / "__pycache__").mkdir(exist_ok=True)
    (copy.bridge_dir / "__pycache__" / "stale.cpython-314.pyc").write_bytes(b"not a source")
    assert copy.identity() == guest_sources().identity()
    assert component_store(tmp_path / "a", sources=copy).image == component_store(tmp_path / "b").image


def test_the_sandbox_image_changes_when_any_source_file_changes(tmp_path: Path) -> None:
    copy = _copy_of_the_sources(tmp_path / "copy")
    before = copy.identity()
    with (copy.wit_dir / "world.wit").open("a") as stream:
        stream.write("\n")
    assert copy.identity() != before


def test_the_sandbox_image_changes_with_the_builder_or_the_time_zone_data(monkeypatch: pytest.MonkeyPatch) -> None:
    before = guest_sources().identity()
    assert "componentize-py" in assets.builder_version() and "tzdata" in assets.builder_version()
    monkeypatch.setattr(assets, "builder_version", lambda: "componentize-py 9.9.9; tzdata 2099.1 (2099a)")
    assert guest_sources().identity() != before


def test_a_build_reads_a_staged_copy_with_the_identity_of_the_sources(tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    assert guest_sources().stage(staged) == guest_sources().identity()
    assert (staged / "bridge" / "app.py").is_file() and (staged / "wit" / "world.wit").is_file()
    assert (staged / "extra" / "tzdata" / "zones").is_file()
    assert not list(staged.rglob("__pycache__"))


@pytest.fixture
def shared_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def test_an_explicit_cache_dir_that_cannot_be_created_fails_fast_without_building(shared_tmp: Path) -> None:
    progress: list[str] = []
    store = component_store(Path("/dev/null/x"), progress=progress.append)
    started = time.monotonic()
    with pytest.raises(BuildError, match=r"/dev/null/x cannot be created.*--cache-dir"):
        store.sandbox_image()
    assert time.monotonic() - started < 5  # a build takes 15-60 s
    assert progress == [] and not any(shared_tmp.iterdir())  # no build, no fallback


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write into a read-only directory")
def test_a_read_only_explicit_cache_dir_without_a_build_fails_fast(tmp_path: Path, shared_tmp: Path) -> None:
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    with pytest.raises(BuildError, match=rf"{read_only} is not writable.*wasmexec build --output"):
        component_store(read_only).sandbox_image()
    assert not any(shared_tmp.iterdir())


def test_a_cache_dir_that_is_a_file_fails_with_a_build_error(tmp_path: Path, shared_tmp: Path) -> None:
    a_file = tmp_path / "cache"
    a_file.write_text("not a directory")
    with pytest.raises(BuildError, match=str(a_file)):
        component_store(a_file).sandbox_image()


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX modes")
def test_your_own_default_cache_dir_left_group_writable_is_tightened_not_abandoned(
    tmp_path: Path, shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "wasmexec").mkdir()
    (tmp_path / "wasmexec").chmod(0o775)  # as `mkdir` makes it under umask 002
    store = component_store()
    assert store.writable_directory() == tmp_path / "wasmexec"
    assert (tmp_path / "wasmexec").stat().st_mode & 0o022 == 0
    assert not any(shared_tmp.iterdir())
