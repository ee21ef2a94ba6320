"""What a guest image ("profile") offers, as users and models see it: its Python, its packages.

Each image says its own (`wasmexec._sandbox.image.Image.describe`); the names are the
registry's (`wasmexec._sandbox.registry`). The science profile's packages are read from the
metadata inside its stdlib zip (the file the guest imports them from), never written here;
inside a run ``codemode.discovery.packages()`` reports the same list. Nothing here imports
wasmtime, or any other wasmexec module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: Where a featured package's import name differs from its name (a model would guess wrong).
_IMPORTED_AS = {"scikit-learn": "sklearn"}


@dataclass(frozen=True)
class Package:
    """An installed distribution the guest can import."""

    name: str
    version: str


@dataclass(frozen=True)
class Profile:
    """One guest image as users and models see it."""

    name: str
    """The profile's name in the registry."""
    python: str
    """The guest's Python version, e.g. "3.14"."""
    summary: str
    """One line: what it offers."""
    packages: tuple[Package, ...] = ()
    """What it can import beyond the standard library (none in the default profile)."""
    featured: tuple[str, ...] = ()
    """The packages named first (with their versions) when the packages are listed in a sentence."""
    intro: str = ""
    """The tool description's first paragraph when it is the default profile offered (``{python}`` and
    ``{packages}`` are filled in)."""

    def package_line(self) -> str:
        """The packages in a few words: ``numpy 2.5.2, pandas 3.0.6, … and 47 more``."""
        if not self.packages:
            return "the standard library only"
        versions = {package.name.lower(): package.version for package in self.packages}
        shown = [name for name in self.featured if name in versions]
        named = [
            f"{name} {versions[name]}" + (f" (import {_IMPORTED_AS[name]})" if name in _IMPORTED_AS else "")
            for name in shown
        ]
        more = len(self.packages) - len(shown)
        return ", ".join(named) + (f" and {more} more" if more else "")


DEFAULT = Profile(
    "default", "3.14", "Python 3.14, the standard library only",
    intro="Run Python 3.14 in a fresh WebAssembly sandbox and call MCP tools from it. Only the standard "
    "library (json, re, datetime, zoneinfo, collections, math, statistics, csv, asyncio, …); no network, "
    "processes, threads, sqlite3 or third-party packages.",
)  # fmt: skip


class Described(Protocol):
    """A runtime that says which profile it runs (`wasmexec._sandbox.runtime.ImageRuntime`)."""

    def describe(self) -> Profile: ...


def profile_of(runtime: Described) -> Profile:
    """The profile a runtime runs, with its packages (the science image must be built: `BuildError` if not)."""
    return runtime.describe()
