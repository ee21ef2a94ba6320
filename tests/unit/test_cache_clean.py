"""`wasmexec cache` and `cache clean`: stale artifacts go, this install's images and foreign files stay."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from wasmexec._cli.main import main
from wasmexec._sandbox.cachedir import Current, current, inventory


def _names(now: Current) -> dict[str, list[str]]:
    """Files as each image and engine would leave them: this install's, stale ones, and others."""
    fuel, nofuel = sorted(now.keys("default"))
    science_fuel, science_nofuel = sorted(now.keys("science"))
    default_image, science_image = now.image("default"), now.image("science")
    old, old_science = "0" * 32, "1" * 32
    return {
        "current": [
            f"guest-{default_image}.json", f"guest-{default_image}.wasm",
            f"{default_image}-{fuel}.cwasm", f"{default_image}-{fuel}.cwasm.json",
            f"{default_image}-{nofuel}.cwasm",
            f"science-{science_image}.json", f"science-{science_image}.wasm",
            f"science-{science_image}-{science_fuel}.cwasm", f"science-{science_image}-{science_nofuel}.cwasm",
            f"science-stdlib-{now.image('science', 'stdlib')}",
        ],
        "stale": [
            f"guest-{old}.json", f"guest-{old}.wasm", f"{old}-{fuel}.cwasm", f"{old}-{fuel}.cwasm.json",
            f"{default_image}-wasmtime1.0.0-v1-fuel.cwasm",  # this image, another wasmtime
            f"science-{old_science}.wasm", f"science-{old_science}-{science_fuel}.cwasm",
            f"science-{science_image}-wasmtime1.0.0-s1-fuel.cwasm",
            f"science-stdlib-{'2' * 32}",
            f".guest-{default_image}.wasm.abc123", ".science-build-xyz",  # unfinished writes
        ],
        "other": [".lock", "tool-schemas.json", "notes.txt"],
    }  # fmt: skip


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, dict[str, list[str]]]:
    names = _names(current())
    for group in names.values():
        for name in group:
            path = tmp_path / name
            if "stdlib" in name or "build-" in name:
                path.mkdir()
                (path / "python315.zip").write_bytes(b"z" * 1000)
            else:
                path.write_bytes(b"x" * 100)
    return tmp_path, names


def test_the_inventory_sorts_every_file_into_this_installs_images_stale_and_other(
    cache: tuple[Path, dict[str, list[str]]],
) -> None:
    directory, names = cache
    kinds = {entry.path.name: entry.kind for entry in inventory(directory, current())}
    assert {name for name, kind in kinds.items() if kind in ("default", "science")} == set(names["current"])
    assert {name for name, kind in kinds.items() if kind == "stale"} == set(names["stale"])
    assert {name for name, kind in kinds.items() if kind == "other"} == set(names["other"])


def test_clean_removes_only_stale_files_and_lists_each_with_its_size(
    cache: tuple[Path, dict[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, names = cache
    assert main(["cache", "clean", "--cache-dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert sorted(os.listdir(directory)) == sorted(names["current"] + names["other"])
    for name in names["stale"]:
        assert f"removed {directory / name} (" in out
    assert f"science-stdlib-{'2' * 32} (1.0 kB; another science image)" in out
    assert f"removed {len(names['stale'])} entries" in out


def test_a_dry_run_lists_what_clean_would_remove_and_removes_nothing(
    cache: tuple[Path, dict[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, names = cache
    before = sorted(os.listdir(directory))
    assert main(["cache", "clean", "--dry-run", "--cache-dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert sorted(os.listdir(directory)) == before
    assert out.count("would remove ") == len(names["stale"]) + 1  # each, and the total


def test_cache_reports_disk_usage_by_kind(
    cache: tuple[Path, dict[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, _ = cache
    assert main(["cache", "--cache-dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert main(["cache", "info", "--cache-dir", str(directory)]) == 0
    assert capsys.readouterr().out == out
    assert f"cache {directory}: " in out
    assert "default image (this install): 500 B in 5 entries" in out
    assert "science image (this install): 1.4 kB in 5 entries" in out
    assert "stale (wasmexec cache clean removes them): " in out and "other files (kept): 300 B in 3 entries" in out


def test_clean_of_a_missing_directory_removes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "clean", "--cache-dir", str(tmp_path / "absent")]) == 0
    assert "removed 0 entries" in capsys.readouterr().out


def test_clean_of_a_directory_with_nothing_stale_writes_nothing_not_even_a_lock(
    cache: tuple[Path, dict[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, names = cache
    for name in names["stale"] + [".lock"]:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    before = sorted(os.listdir(directory))
    assert main(["cache", "clean", "--cache-dir", str(directory)]) == 0  # a shipped read-only dir stays as it is
    assert sorted(os.listdir(directory)) == before and "removed 0 entries" in capsys.readouterr().out


def test_a_relative_cache_directory_is_taken_from_where_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The build runs componentize-py in another working directory: a relative path there named another place
    # (a fresh build failed with "componentize-py failed (exit 0)").
    from wasmexec._sandbox.component_builder import component_store

    monkeypatch.chdir(tmp_path)
    store = component_store(Path("relative/cache"))
    assert store.directory == tmp_path / "relative" / "cache"
