"""No `wasmexec` module imports another that imports it back, however indirectly.

Every import statement counts, wherever it is: at the top of a module, inside a
function (a deferred import still ties the two modules together) and under
``if TYPE_CHECKING:`` (a type-only cycle is still a cycle to a reader and to the type
checker). The sources are parsed, not imported, so a cycle is found even where it would
not fail at import time. An import names an edge to the module it names: ``from a.b import
c`` points at ``a.b.c`` if that is a module, else at the package ``a.b`` (its
``__init__``); relative imports are resolved. Importing a submodule also runs its
package's ``__init__``, but that is not counted as an edge: the packages here re-export
nothing that imports back.

Modules must form no cycle at all. Top-level packages (``_sandbox``, ``_tools``, a loose
module like ``_limits`` counts as its own package) should import one way too; the cycles
between them that are known are listed in `KNOWN_PACKAGE_CYCLES`, a list that may only
shrink: the test fails when a new one appears and when a listed one is gone (then delete
its line).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "wasmexec"

#: Cycles between top-level packages that exist today, each with why and what removes it.
KNOWN_PACKAGE_CYCLES: set[frozenset[str]] = set()


def modules(package_dir: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (its file, whether it is a package's ``__init__``)."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports, by any import statement anywhere in it."""
    known = modules(package_dir)

    def owner(name: str) -> str | None:  # the module itself, else the nearest package that exists
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in known.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(owner(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
                source = ".".join(part for part in (base, node.module or "") if part)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.add(submodule if submodule in known else owner(source))
        graph[name] = {target for target in targets if target is not None and target != name}
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The module graph with each module folded into its top-level package (``wasmexec._x``)."""
    folded: dict[str, set[str]] = {}
    for source, targets in graph.items():
        top = ".".join(source.split(".")[:2])
        folded.setdefault(top, set()).update(".".join(t.split(".")[:2]) for t in targets)
    return {top: targets - {top} for top, targets in folded.items()}


def describe(found: Iterable[frozenset[str]], graph: Mapping[str, Iterable[str]]) -> str:
    """Each cycle with the edges inside it, for a failure message that says what to cut."""
    lines = []
    for component in sorted(found, key=sorted):
        lines.append(" <-> ".join(sorted(component)))
        lines += [f"    {m} imports {', '.join(sorted(set(graph[m]) & component))}" for m in sorted(component)]
    return "\n".join(lines)


def test_no_wasmexec_module_imports_itself_back_through_others() -> None:
    graph = import_graph(PACKAGE_DIR)
    assert "wasmexec._runctx.runstate" in graph  # the walk found the package
    found = cycles(graph)
    assert not found, "modules that import each other in a cycle:\n" + describe(found, graph)


def test_top_level_packages_import_one_way_but_for_the_known_cycles_which_only_shrink() -> None:
    graph = package_graph(import_graph(PACKAGE_DIR))
    found = cycles(graph)
    assert not found - KNOWN_PACKAGE_CYCLES, "new cycles between packages:\n" + describe(
        found - KNOWN_PACKAGE_CYCLES, graph
    )
    assert not KNOWN_PACKAGE_CYCLES - found, (
        f"cycles gone, delete them from KNOWN_PACKAGE_CYCLES: {sorted(map(sorted, KNOWN_PACKAGE_CYCLES - found))}"
    )


_TYPE_ONLY = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"a.py": "import pkg.b\n", "b.py": "from pkg import a\n"}, {frozenset({"pkg.a", "pkg.b"})}, id="absolute"
        ),
        pytest.param(
            {"a.py": _TYPE_ONLY + "    from pkg.b import B\n", "b.py": "from .a import A\n"},
            {frozenset({"pkg.a", "pkg.b"})},
            id="type-only and relative",
        ),
        pytest.param(
            {"sub/__init__.py": "", "sub/c.py": "def f():\n    from ..a import x\n", "a.py": "from pkg.sub import c\n"},
            {frozenset({"pkg.a", "pkg.sub.c"})},
            id="function-level, two levels up",
        ),
        pytest.param(
            {"sub/__init__.py": "from . import c\n", "sub/c.py": "X = 1\n", "a.py": "from .sub import X\n"},
            set(),
            id="no cycle",
        ),
    ],
)
def test_the_check_finds_cycles_of_every_kind_of_import(
    tmp_path: Path, files: dict[str, str], expected: set[frozenset[str]]
) -> None:
    package = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert cycles(import_graph(package)) == expected


def test_packages_are_folded_so_a_cycle_through_two_folders_is_found() -> None:
    graph = {"w._a.x": {"w._b.y"}, "w._b.y": set(), "w._b.z": {"w._a.x"}, "w._a.v": {"w._b.z"}}
    assert not cycles(graph)
    assert cycles(package_graph(graph)) == {frozenset({"w._a", "w._b"})}
