"""What a guest image supplies to the generic runtime: the one interface every image implements.

An image (the default componentize-py component, the science snapshot, …) says how its
engines are configured, how its compiled form is loaded and linked into a `Guest` for one
limit mode, how it is built ahead of time, and where its cache lives. `ImageRuntime` in
`wasmexec._sandbox.runtime` holds one guest per limit mode for any image, so nothing else
repeats per image.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from wasmtime import Engine

from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.guest import Guest

if TYPE_CHECKING:
    from wasmexec._exceptions import BuildError
    from wasmexec._profiles import Profile
    from wasmexec._sandbox.image_cache import CompiledImageCache

G_co = TypeVar("G_co", bound=Guest, covariant=True)


#: An image's identity in file names: the first 32 hex digits of its ``sha256:``.
HEX32 = "[0-9a-f]{32}"


@dataclass(frozen=True)
class CacheFile:
    """One kind of file an image leaves in a cache directory, and which of them this install uses."""

    pattern: re.Pattern[str]
    """The whole name, with the identity as ``(?P<image>...)`` and, for compiled forms, ``(?P<key>...)``."""
    image: str
    """This install's identity (32 hex digits): another one is stale."""
    keys: frozenset[str] | None = None
    """The engine keys this install compiles for (compiled forms only): another one is stale."""
    what: str = "build"
    """What it is ("build", "compiled", …): `Current.image` names it."""


@dataclass(frozen=True)
class CacheFiles:
    """What one image leaves in a cache directory (its module's ``cache_files()``)."""

    files: tuple[CacheFile, ...]
    prefixes: tuple[str, ...]
    """How its temporary names start after the dot (`_atomic_write`, builds): a leftover is an unfinished write."""


@dataclass(frozen=True)
class EngineSettings:
    """How an image's wasmtime engines are configured beyond what every image gets (epochs, fuel per mode,
    the wasm stack, speed): made by `wasmexec._sandbox.runtime.make_engine`."""

    format: str
    """Names the configuration in compiled-artifact file names: bump it when the configuration changes."""
    wasm_exceptions: bool = False
    """The wasm exception-handling proposal (CPython 3.15 for WASI uses it)."""


class Image(Protocol[G_co]):
    """One guest image as the runtime sees it."""

    profile: str
    """The profile name users pick it by (``--profile``, ``Sandbox(profile=...)``)."""
    label: str
    """How build messages name it, e.g. "sandbox image"."""
    engine: EngineSettings
    """Its engine configuration."""

    @property
    def identity(self) -> str:
        """Its ``sha256:`` (the run result's ``sandbox_image``): the digest of what its guest is made of."""
        ...

    @property
    def artifacts(self) -> CompiledImageCache:
        """Its compiled-image cache (the directory, the trust checks, the files; ``image``: its digest)."""
        ...

    def load(self, engine: Engine, engine_key: str, ticker: EpochTicker, fuel: bool) -> G_co:
        """The guest of one limit mode: its compiled form loaded for `engine` and linked (built on first use
        where the image builds itself; a `BuildError` where it must be built beforehand)."""
        ...

    def build(self, guest: Callable[[bool], Guest]) -> None:
        """Builds and compiles every limit mode now (`wasmexec build`), through `guest` (the runtime's cache)."""
        ...

    def export(self, target: Path, engines: dict[str, Engine]) -> list[Path]:
        """Writes a shippable artifact directory: its cache's files for `engines` (engine key → engine), and
        whatever else it reads at run time; the paths written."""
        ...

    def describe(self) -> Profile:
        """What it offers a run (Python, packages) and its description text (a `BuildError` if that needs a build)."""
        ...

    def unavailable(self, problem: BuildError) -> BuildError:
        """What `wasmexec serve` says when the image cannot be loaded at startup (`problem` itself, or one that
        says how to install or build it)."""
        ...
