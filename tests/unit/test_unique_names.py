"""Names say what they are: no two wasmexec modules, and no two classes, share a name across packages,
unless one is the other's interface (issue 18 §1)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "wasmexec"

#: Module names in more than one package because one is the other's interface.
INTERFACES = {
    "guest.py": "_sandbox/guest.py is the Guest protocol; _science/guest.py implements it",
    "image.py": "_sandbox/image.py is the Image protocol; _science/image.py implements it",
}
#: Shared names that exist today, each with why; this list may only shrink.
KNOWN: dict[str, str] = {}


def shared_module_names(package_dir: Path) -> dict[str, list[str]]:
    """Module file name → the modules with it, for the names in more than one place (``__init__`` aside)."""
    places = defaultdict(list)
    for path in sorted(package_dir.rglob("*.py")):
        if path.name != "__init__.py":
            places[path.name].append(str(path.relative_to(package_dir)))
    return {name: where for name, where in places.items() if len(where) > 1}


def shared_class_names(package_dir: Path) -> dict[str, list[str]]:
    """Top-level class name → the modules defining it, for the names in more than one module."""
    places = defaultdict(list)
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                places[node.name].append(str(path.relative_to(package_dir)))
    return {name: where for name, where in places.items() if len(where) > 1}


def test_no_two_modules_share_a_name_but_an_interface_and_its_implementation() -> None:
    shared = shared_module_names(PACKAGE_DIR)
    assert set(shared) - INTERFACES.keys() - KNOWN.keys() == set(), shared
    assert KNOWN.keys() <= shared.keys(), f"renamed: delete from KNOWN {sorted(KNOWN.keys() - shared.keys())}"


def test_no_two_classes_share_a_name() -> None:
    assert shared_class_names(PACKAGE_DIR) == {}


def test_the_checks_find_a_shared_name(tmp_path: Path) -> None:
    for package in ("_a", "_b"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "pool.py").write_text("class Pool:\n    pass\n", encoding="utf-8")
    assert shared_module_names(tmp_path) == {"pool.py": ["_a/pool.py", "_b/pool.py"]}
    assert shared_class_names(tmp_path) == {"Pool": ["_a/pool.py", "_b/pool.py"]}
