"""The default image's cache pruning leaves the science image's files alone (they share the directory)."""

from __future__ import annotations

from pathlib import Path

from wasmexec._sandbox.component_builder import _prune


def test_pruning_deletes_orphaned_default_artifacts_but_keeps_science_ones(tmp_path: Path) -> None:
    image = "a" * 32
    (tmp_path / f"guest-{image}.json").write_text('{"sandbox_image": "sha256:' + image + '"}')
    orphan = tmp_path / f"{'b' * 32}-wasmtime50-v1-fuel.cwasm"
    kept = tmp_path / f"{image}-wasmtime50-v1-fuel.cwasm"
    science = tmp_path / f"science-{'c' * 32}-wasmtime49.0.0-s1-fuel.cwasm"
    for path in (orphan, kept, science, Path(f"{science}.json")):
        path.write_bytes(b"x")
    _prune(tmp_path, keep_images=3)
    assert not orphan.exists()
    assert kept.exists() and science.exists() and Path(f"{science}.json").exists()
