"""A user profile as an image plug-in (`wasmexec._sandbox.image.Image`): its base image plus its packages.

The base image (default or another built-in) is used as it is: same engines, same compiled
form, same cache. Each run of the profile gets its package tree preopened read-only at
`GUEST_PACKAGES` and, in its options, that path (appended to ``sys.path``, after the
standard library and the bridge, so a package cannot shadow them) and the package list
(``codemode.discovery.packages()``). Importing a package costs what importing it costs, in
the runs that import it; a run that imports none pays for one preopen.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wasmtime import Engine, Store, WasiConfig

from wasmexec._exceptions import BuildError
from wasmexec._profiles import Package, Profile
from wasmexec._sandbox import registry
from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.guest import Guest
from wasmexec._sandbox.image import HEX32, CacheFile, CacheFiles, Image
from wasmexec._sandbox.image_cache import CompiledImageCache, Progress, atomic_write, default_cache_dir
from wasmexec._sandbox.pooling import Pooling
from wasmexec._sandbox.report import GuestReport
from wasmexec._sandbox.runtime import ImageRuntime
from wasmexec._userprofile import profile_store as store

#: Where the guest finds the profile's packages (read-only).
GUEST_PACKAGES = "/packages"
#: The tool description's first paragraph when a user profile is the default one offered.
USER_INTRO = (
    "Run Python {python} in a fresh WebAssembly sandbox and call MCP tools from it, with {packages} "
    "(discovery.packages() lists them) and the standard library; no network, processes or threads."
)


class UserGuest:
    """The base image's guest, with the profile's packages preopened and named in each run's options."""

    def __init__(
        self, base: Guest, image: str, tree: Path, packages: tuple[tuple[str, str], ...], writable: bool = False
    ) -> None:
        self.base = base
        self.writable = writable
        self.engine, self.ticker, self.fuel = base.engine, base.ticker, base.fuel
        self.memory_floor_bytes = base.memory_floor_bytes
        self.image = image
        self.tree = tree
        self.run_options: dict[str, object] = {
            **base.run_options, "packages": {"path": GUEST_PACKAGES, "list": [list(item) for item in packages]},
        }  # fmt: skip

    def configure(self, wasi: WasiConfig) -> None:
        self.base.configure(wasi)
        # read-only: no run changes what the next sees (writable only for the build's compile run)
        wasi.preopen_dir(str(self.tree), GUEST_PACKAGES, self.writable)

    def instantiate(self, store: Store) -> Any:
        return self.base.instantiate(store)

    def invoke(self, store: Store, instance: Any, code: str, options_json: str, max_result_bytes: int) -> GuestReport:
        return self.base.invoke(store, instance, code, options_json, max_result_bytes)

    def warm(self, store: Store, instance: Any) -> bool:
        return self.base.warm(store, instance)


def unknown_profile(name: str, directory: Path) -> ValueError:
    """The error for a profile that is neither built in nor built in `directory`: what there is, how to build."""
    yours = store.names(directory)
    listed = ", ".join(registry.PROFILES) + (f"; yours in {directory}: {', '.join(yours)}" if yours else "")
    return ValueError(f"unknown profile {name!r}; the profiles are {listed}. Build your own with "
                      f"`wasmexec build --profile {name} --requirements FILE` (pure-Python packages)")  # fmt: skip


def stored_image(name: str, cache_dir: Path | None, progress: Progress | None) -> UserImage:
    """User profile `name` as stored in `cache_dir` (None: the per-user cache dir), on its base image;
    a ValueError when there is none, a `BuildError` when it cannot be used."""
    directory = cache_dir if cache_dir is not None else default_cache_dir()
    found = store.find(directory, name)
    if found is None:
        raise unknown_profile(name, directory)
    base: Image[Any] = registry.runtime(found.base, cache_dir, progress).image
    if base.identity != found.base_image:
        raise BuildError(f"profile {name} was built on another {found.base} image than this wasmexec's "
                         f"(upgraded?), whose Python may differ; {store.rebuild_hint(name)}")  # fmt: skip
    return UserImage(found, base)


class UserImage:
    """A user profile (`wasmexec._sandbox.image.Image`): a base image plus a package tree and its lock."""

    def __init__(self, stored: store.StoredProfile, base: Image[Any], writable: bool = False) -> None:
        """`writable`: the tree is preopened writable (only for `wasmexec._userprofile.bytecode`)."""
        self.stored = stored
        self.profile = stored.name
        self.label = f"profile {stored.name} (on {stored.base})"
        self.base = base
        self.engine = base.engine
        self.writable = writable

    @property
    def artifacts(self) -> CompiledImageCache:
        return self.base.artifacts

    @property
    def identity(self) -> str:
        return self.stored.identity

    def load(self, engine: Engine, engine_key: str, ticker: EpochTicker, fuel: bool) -> UserGuest:
        base = self.base.load(engine, engine_key, ticker, fuel)
        return UserGuest(base, self.identity, self.stored.tree, self.stored.packages, self.writable)

    def build(self, guest: Callable[[bool], Guest]) -> None:
        self.base.build(guest)

    def export(self, target: Path, engines: dict[str, Engine]) -> list[Path]:
        """The base image's files, and the profile's record, lock and tree (a cache to ship as it is)."""
        written = self.base.export(target, engines)
        directory = self.stored.tree.parent
        for path in (store.record_path(directory, self.profile), store.lock_path(directory, self.profile)):
            atomic_write(target / path.name, path.read_bytes())
            written.append(target / path.name)
        tree = target / self.stored.tree.name
        if not tree.is_dir():
            shutil.copytree(self.stored.tree, tree)
        written.append(tree)
        return written

    def describe(self) -> Profile:
        base = self.base.describe()
        own = tuple(Package(name, version) for name, version in self.stored.packages)
        names = ", ".join(name for name, _ in self.stored.packages) or "no packages"
        return Profile(self.profile, base.python, f"{base.summary}, plus {names}", (*base.packages, *own),
                       tuple(name.lower() for name, _ in self.stored.packages), USER_INTRO)  # fmt: skip

    def unavailable(self, problem: BuildError) -> BuildError:
        return self.base.unavailable(problem)


class UserRuntime(ImageRuntime[UserGuest]):
    """Owns a user profile's guest, one per limit mode. Share one per process; it is thread-safe."""

    def __init__(
        self,
        name: str,
        cache_dir: Path | str | None = None,
        progress: Progress | None = None,
        *,
        pooling: Pooling | None = None,
    ) -> None:
        super().__init__(stored_image(name, Path(cache_dir) if cache_dir is not None else None, progress), pooling)


def cache_files(directory: Path, name: str) -> CacheFiles:
    """The files profile `name` leaves in `directory`: its record and lock, and its current tree."""
    try:
        found = store.find(directory, name)
    except BuildError:
        found = None  # damaged or open to others: no tree of it is current (a rebuild replaces it)
    current = found.tree.name.rsplit("-", 1)[1] if found is not None else ""
    prefix = f"{store.PREFIX}{name}"
    return CacheFiles((
        CacheFile(re.compile(rf"{prefix}\.(?P<image>json)"), "json", what="record"),
        CacheFile(re.compile(rf"{prefix}\.(?P<image>lock)"), "lock", what="lock"),
        CacheFile(re.compile(rf"{prefix}-(?P<image>{HEX32})"), current, what="packages"),
    ), prefixes=(f"{prefix}.",))  # fmt: skip
