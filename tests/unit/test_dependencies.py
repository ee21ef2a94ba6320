"""Every third-party package that wasmexec/ imports is a declared dependency in pyproject.toml.

A package that only arrives because another dependency needs it today (jsonschema,
the HTTP client, uvicorn through `mcp`) can vanish with that dependency's next release.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "wasmexec"


def _normalized(distribution: str) -> str:
    """A distribution name in PEP 503 form (`Typing_Extensions` → `typing-extensions`)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def declared_distributions() -> set[str]:
    """The names in pyproject's `[project] dependencies`, without versions, extras or markers."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = set()
    for requirement in project["dependencies"]:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        assert match, f"unreadable requirement in pyproject.toml: {requirement!r}"
        names.add(_normalized(match.group()))
    return names


def imported_modules(tree: Path) -> dict[str, str]:
    """Top-level names of every absolute import under `tree` (also in functions) → first file using it."""
    found: dict[str, str] = {}
    for path in sorted(tree.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], str(path.relative_to(ROOT)))
    return found


def third_party_imports() -> dict[str, str]:
    """The imports of wasmexec/ that are neither the standard library nor wasmexec itself."""
    return {
        module: where
        for module, where in imported_modules(ROOT / PACKAGE).items()
        if module not in sys.stdlib_module_names and module not in {PACKAGE, "__future__"}
    }


def test_the_import_scan_finds_the_packages_wasmexec_is_built_on() -> None:
    assert {"wasmtime", "mcp", "anyio", "jsonschema"} <= set(third_party_imports())


def test_every_third_party_package_wasmexec_imports_is_a_declared_dependency() -> None:
    providers = packages_distributions()
    declared = declared_distributions()
    undeclared = []
    for module, where in sorted(third_party_imports().items()):
        distributions = {_normalized(name) for name in providers.get(module, [])}
        if not distributions:
            undeclared.append(f"{module} (imported in {where}) is not installed, so no distribution provides it")
        elif not distributions & declared:
            undeclared.append(f"{module} (imported in {where}) comes from {sorted(distributions)}, not declared")
    assert not undeclared, "add to [project] dependencies in pyproject.toml:\n" + "\n".join(undeclared)
