"""What a cache directory holds, and removing what this install no longer uses (`wasmexec cache`).

Every image and engine leaves files named after them (`wasmexec._sandbox.artifacts`,
`wasmexec._science.artifacts`): a new bridge, recipe or wasmtime version writes new ones
next to the old, and a science image with its compiled forms is over 1 GiB. Each file
is sorted into:

- ``default`` / ``science``: this install's current images compiled for this wasmtime (kept);
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

from wasmexec._sandbox.artifacts import _locked

_HEX32 = "[0-9a-f]{32}"
_DEFAULT_BUILD = re.compile(rf"guest-(?P<image>{_HEX32})\.(?:json|wasm)")
_DEFAULT_COMPILED = re.compile(rf"(?P<image>{_HEX32})-(?P<key>[^/]+?)\.cwasm(?:\.json)?")
_SCIENCE_BUILD = re.compile(rf"science-(?P<image>{_HEX32})\.(?:json|wasm)")
_SCIENCE_COMPILED = re.compile(rf"science-(?P<image>{_HEX32})-(?P<key>[^/]+?)\.cwasm(?:\.json)?")
_SCIENCE_STDLIB = re.compile(rf"science-stdlib-(?P<image>{_HEX32})")
#: Temporary names of our writes (`_atomic_write`, builds, the stdlib folder): a leftover is an unfinished write.
_UNFINISHED = re.compile(rf"\.(?:guest-|science-|build-|{_HEX32}-)")


@dataclass(frozen=True)
class Current:
    """What this install uses: each image's short digest and the engine keys it compiles for."""

    default_image: str
    default_keys: frozenset[str]
    science_image: str
    science_keys: frozenset[str]
    science_stdlib: str


@dataclass(frozen=True)
class Entry:
    """One file or folder of a cache directory."""

    path: Path
    size: int
    """Bytes (a folder: of all its files)."""
    kind: str
    """"default", "science", "stale" or "other"."""
    why: str = ""
    """For a stale one: why this install has no use for it."""


def current() -> Current:
    """This install's images and engine keys (reads the bridge's sources to name the images; builds nothing)."""
    from wasmexec._sandbox.assets import guest_sources
    from wasmexec._sandbox.runtime import engine_key
    from wasmexec._science import upstream
    from wasmexec._science.artifacts import science_identity
    from wasmexec._science.runtime import engine_key as science_engine_key

    sources = guest_sources()
    return Current(
        default_image=sources.identity()[:32],
        default_keys=frozenset(engine_key(fuel) for fuel in (True, False)),
        science_image=science_identity(sources)[:32],
        science_keys=frozenset(science_engine_key(fuel) for fuel in (True, False)),
        science_stdlib=upstream.STDLIB_ZIP_SHA256[:32],
    )


def inventory(directory: Path, now: Current) -> list[Entry]:
    """Every entry of `directory`, sorted into kinds (empty when it does not exist)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [_entry(directory / name, now) for name in names]


def _entry(path: Path, now: Current) -> Entry:
    kind, why = _classify(path.name, now)
    return Entry(path, _size(path), kind, why)


def _classify(name: str, now: Current) -> tuple[str, str]:
    if _UNFINISHED.match(name):
        return "stale", "an unfinished write (or one in progress, which cleaning waits for)"
    for pattern, profile, image in ((_SCIENCE_BUILD, "science", now.science_image),
                                    (_DEFAULT_BUILD, "default", now.default_image),
                                    (_SCIENCE_STDLIB, "science", now.science_stdlib)):  # fmt: skip
        found = pattern.fullmatch(name)
        if found:
            return (profile, "") if found["image"] == image else ("stale", f"another {profile} image")
    compiled = ((_SCIENCE_COMPILED, "science", now.science_image, now.science_keys),
                (_DEFAULT_COMPILED, "default", now.default_image, now.default_keys))  # fmt: skip
    for pattern, profile, image, keys in compiled:
        found = pattern.fullmatch(name)
        if found:
            if found["image"] != image:
                return "stale", f"another {profile} image"
            return (profile, "") if found["key"] in keys else ("stale", f"compiled for {found['key']}")
    return "other", ""


def _size(path: Path) -> int:
    try:
        if path.is_symlink() or not path.is_dir():
            return path.lstat().st_size
        return sum(child.lstat().st_size for child in path.rglob("*") if not child.is_dir() or child.is_symlink())
    except OSError:
        return 0


def clean(directory: Path, now: Current, dry_run: bool = False) -> list[Entry]:
    """Removes the stale entries of `directory` (under its lock); returns them. Never touches the others.

    Raises:
        OSError: the directory cannot be locked or an entry cannot be removed.
    """
    if not directory.is_dir():
        return []
    if dry_run or not any(entry.kind == "stale" for entry in inventory(directory, now)):
        return [entry for entry in inventory(directory, now) if entry.kind == "stale"]  # no lock: read-only is fine
    with _locked(directory):
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
