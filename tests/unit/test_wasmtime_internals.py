"""wasmtime-py's private modules and methods are used in one module only (`wasmtime_internals`).

They change without notice between wasmtime-py releases; with every use in one place, an upgrade
re-checks one file (its docstring says what to check), and a new use elsewhere fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "wasmexec"
OWNER = PACKAGE / "_sandbox" / "wasmtime_internals.py"
#: wasmtime-py's private methods we call (on its errors, traps, stores, callers and function types).
PRIVATE_METHODS = {"_consume", "_invalidate", "_from_ptr", "convert_from_c", "convert_to_c"}


def _private_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "wasmtime" and any(part.startswith("_") for part in parts[1:])


def _uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _private_module(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "wasmtime":
            if _private_module(node.module):
                found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_METHODS:
            found.append(f".{node.attr}")
    return found


def test_only_the_internals_module_uses_wasmtime_privates() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): uses
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != OWNER and (uses := _uses(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}


def test_the_check_finds_each_kind_of_use() -> None:
    code = ("from wasmtime import _ffi as ffi\nimport wasmtime._bindings\nfrom wasmtime._ffi import X\n"
            "from wasmtime.component._types import FuncType\nerror._consume()\n")  # fmt: skip
    assert _uses(ast.parse(code)) == ["wasmtime._ffi", "wasmtime._bindings", "wasmtime._ffi",
                                      "wasmtime.component._types", "._consume"]  # fmt: skip
    assert _uses(ast.parse(OWNER.read_text())), "the internals module uses them"
