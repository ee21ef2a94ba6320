"""The run's files, set up before the code runs: working directory, ``skills`` package, a profile's packages.

The host preopens /workspace and /tmp (and a read-only /skills) only for runs that have a
workspace, and then names them in the run's options; a run without one pays nothing here.
wasi-libc starts in ``/`` and ignores ``PWD``, so the working directory is set by ``chdir``.
"""

from __future__ import annotations

import ast
import os
import sys
import types
from typing import Any

#: Skills listed at most per directory, bytes of a skill file parsed at most, characters of a doc kept.
_MAX_SKILLS = 200
_MAX_SKILL_BYTES = 256 * 1024
_MAX_DOC_CHARS = 500

#: The packages of the run's user profile, as the host names them: ``(name, version)``.
profile_packages: list[tuple[str, str]] = []


# Set once, in the image (every run starts from it): a .pyc in the workspace would be a spurious artifact.
sys.dont_write_bytecode = True


def enter(options: dict[str, Any]) -> None:
    """Moves into the run's working directory and installs the ``skills`` namespace package."""
    cwd = options.get("cwd")
    if isinstance(cwd, str):
        os.chdir(cwd)
    paths = options.get("skills")
    # A list comprehension, not `all(<generator>)`: it runs inline, a generator costs a frame per run.
    if isinstance(paths, list) and not [path for path in paths if not isinstance(path, str)]:
        package = types.ModuleType("skills", "Helpers saved as files: /skills (read-only) and /workspace/skills.")
        package.__path__ = list(paths)
        sys.modules["skills"] = package
    packages = options.get("packages")
    if packages is not None:
        _profile_packages(packages)


def _profile_packages(given: Any) -> None:
    """A user profile's packages: their read-only folder goes last on ``sys.path`` (a package cannot shadow
    the standard library or codemode), their names and versions to ``discovery.packages()``."""
    if not isinstance(given, dict):
        return
    path, listed = given.get("path"), given.get("list")
    if isinstance(path, str) and path not in sys.path:
        sys.path.append(path)
    if isinstance(listed, list):
        profile_packages[:] = [(str(item[0]), str(item[1])) for item in listed if isinstance(item, list)
                               and len(item) == 2]  # fmt: skip


def list_skills() -> list[dict[str, str]]:
    """Every importable skill: ``[{"name", "doc"}]``, from module docstrings (nothing is imported)."""
    package = sys.modules.get("skills")
    paths = list(getattr(package, "__path__", []) or [])
    found: dict[str, str] = {}
    for directory in paths:
        try:
            names = sorted(os.listdir(directory))[: _MAX_SKILLS * 4]
        except OSError:
            continue
        listed = 0
        for file_name in names:
            name = file_name[:-3]
            if not file_name.endswith(".py") or not name.isidentifier() or name in found:
                continue
            found[name] = _doc(os.path.join(directory, file_name))
            listed += 1
            if listed >= _MAX_SKILLS:
                break
    return [{"name": name, "doc": doc} for name, doc in sorted(found.items())]


def _doc(path: str) -> str:
    try:
        with open(path, "rb") as file:
            source = file.read(_MAX_SKILL_BYTES + 1)
        if len(source) > _MAX_SKILL_BYTES:
            return ""
        doc = ast.get_docstring(ast.parse(source)) or ""
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    first = doc.strip().split("\n\n", 1)[0].strip()
    return first[:_MAX_DOC_CHARS]
