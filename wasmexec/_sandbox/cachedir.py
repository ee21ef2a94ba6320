"""What a cache directory holds, and removing what this install no longer uses (`wasmexec cache`).

Every image and engine leaves files named after them (each image's ``cache_files()``, found
through `wasmexec._sandbox.registry`): a new bridge, recipe or wasmtime version writes new ones
next to the old, and a science image with its compiled forms is over 1 GiB. Each file
is sorted into:

- a profile's name: this install's current image of that profile, compiled for this wasmtime (kept);
- ``stale``: other images, other wasmtime versions or engine formats, and temporary files
  of writes that never finished (another install sharing the directory would rebuild them);
- ``other``: anything not named like our artifacts (the tool schema cache, locks): kept.

Cleaning holds the directory's lock, which every writer holds while it writes, so no build
in progress loses a file; a process that has a removed ``.cwasm`` mapped keeps its mapping.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from wasmexec._sandbox.image import HEX32, CacheFiles
from wasmexec._sandbox.image_cache import locked


@dataclass(frozen=True)
class Current:
    """This install's images and engine keys, per profile (`wasmexec._sandbox.registry`)."""

    profiles: dict[str, CacheFiles]

    def image(self, profile: str, what: str = "build") -> str:
        """The identity of `profile`'s file of kind `what`."""
        return next(file.image for file in self.profiles[profile].files if file.what == what)

    def keys(self, profile: str) -> frozenset[str]:
        """The engine keys `profile`'s compiled forms are kept for."""
        return frozenset().union(*(file.keys for file in self.profiles[profile].files if file.keys is not None))


@dataclass(frozen=True)
class CacheEntry:
    """One file or folder of a cache directory."""

    path: Path
    size: int
    """Bytes (a folder: of all its files)."""
    kind: str
    """A profile's name (this install's image), "stale" or "other"."""
    why: str = ""
    """For a stale one: why this install has no use for it."""


def current(directory: Path | None = None) -> Current:
    """This install's images and engine keys (reads the bridge's sources to name the images; builds nothing),
    and the user profiles built in `directory`."""
    from wasmexec._sandbox import registry

    built_in = {profile: registry.cache_files(profile) for profile in registry.PROFILES}
    yours = registry.user_profiles(directory) if directory is not None else []
    return Current({**built_in, **{name: registry.cache_files(name, directory) for name in yours}})


def inventory(directory: Path, now: Current) -> list[CacheEntry]:
    """Every entry of `directory`, sorted into kinds (empty when it does not exist)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [_entry(directory / name, now) for name in names]


def _entry(path: Path, now: Current) -> CacheEntry:
    kind, why = _classify(path.name, now)
    return CacheEntry(path, _size(path), kind, why)


def _classify(name: str, now: Current) -> tuple[str, str]:
    prefixes = "|".join(re.escape(prefix) for files in now.profiles.values() for prefix in files.prefixes)
    if re.match(rf"\.(?:{prefixes}|build-|{HEX32}-)", name):
        return "stale", "an unfinished write (or one in progress, which cleaning waits for)"
    for profile, files in now.profiles.items():
        for file in files.files:
            found = file.pattern.fullmatch(name)
            if not found:
                continue
            if found["image"] != file.image:
                return "stale", f"another {profile} image"
            if file.keys is not None and found["key"] not in file.keys:
                return "stale", f"compiled for {found['key']}"
            return profile, ""
    return "other", ""


def _size(path: Path) -> int:
    try:
        if path.is_symlink() or not path.is_dir():
            return path.lstat().st_size
        return sum(child.lstat().st_size for child in path.rglob("*") if not child.is_dir() or child.is_symlink())
    except OSError:
        return 0


def clean(directory: Path, now: Current, dry_run: bool = False) -> list[CacheEntry]:
    """Removes the stale entries of `directory` (under its lock); returns them. Never touches the others.

    Raises:
        OSError: the directory cannot be locked or an entry cannot be removed.
    """
    if not directory.is_dir():
        return []
    if dry_run or not any(entry.kind == "stale" for entry in inventory(directory, now)):
        return [entry for entry in inventory(directory, now) if entry.kind == "stale"]  # no lock: read-only is fine
    with locked(directory):
        stale = [entry for entry in inventory(directory, now) if entry.kind == "stale"]
        for entry in stale:
            if entry.path.is_dir() and not entry.path.is_symlink():
                shutil.rmtree(entry.path)
            else:
                entry.path.unlink(missing_ok=True)
    return stale


def human(size: int) -> str:
    """A size in the units people read: ``1.2 GB``, ``46.8 MB``, ``344 B``."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
