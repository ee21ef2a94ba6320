"""Profiles are named in one place: an image's own folder, and the registry that maps names to images.

The CLI, the server, the cache commands and `Sandbox(profile=...)` ask the registry
(`wasmexec._sandbox.registry`) and never compare profile names, so adding a profile touches
its folder and the registry only. The science profile's name, quoted as code would compare
it, stands for every such comparison.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "wasmexec"
#: Where the name may appear: the science image's own folder, and the registry.
ALLOWED = (PACKAGE_DIR / "_science", PACKAGE_DIR / "_sandbox" / "registry.py")


def quoted_science(package_dir: Path, allowed: tuple[Path, ...]) -> list[str]:
    """``path:line`` of every quoted ``science`` in the package's modules outside `allowed`."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        if any(path == place or place in path.parents for place in allowed):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if '"science"' in line or "'science'" in line:
                found.append(f"{path.relative_to(package_dir.parent)}:{number}")
    return found


def test_the_science_profile_is_named_only_in_its_folder_and_the_registry() -> None:
    assert quoted_science(PACKAGE_DIR, ALLOWED) == []


def test_the_check_finds_a_comparison_outside_them(tmp_path: Path) -> None:
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "main.py").write_text('if args.profile == "science":\n    pass\n', encoding="utf-8")
    (tmp_path / "_science").mkdir()
    (tmp_path / "_science" / "runtime.py").write_text("profile = 'science'\n", encoding="utf-8")
    assert quoted_science(tmp_path, (tmp_path / "_science",)) == [f"{tmp_path.name}/_cli/main.py:1"]
