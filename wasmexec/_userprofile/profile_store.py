"""Where a user profile lives in a cache directory, and reading it back with the trust checks.

A user profile is a base image plus a package tree plus its lock::

    profile-<name>.json          its record: name, base profile, the lock's sha256, the packages
    profile-<name>.lock          the lock: ``name==version --hash=sha256:...`` per wheel
    profile-<name>-<lock>/       the unpacked packages (``<lock>``: the lock's sha256, 32 hex digits)

The guest reads the tree, read-only, as it was written: like a compiled image, it is used only
when nobody but you (or root) could have put it there (`wasmexec._sandbox.trust`): the record
and the lock are regular files, the tree a directory, each owned by you or root and writable by
no one else, and the lock's sha256 is the record's. A rebuild writes a new tree and then the
lock and the record (each renamed into place), so a reader sees the old profile or the new one.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from wasmexec._sandbox import trust

#: A profile's name: a file-name-safe word that a shell and a JSON enum take as it is.
NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: Part of every user profile's identity: bump it when what the guest is given changes.
RECIPE = "1"
#: How the files of a user profile start (a temporary one: with a dot before it).
PREFIX = "profile-"


def name_problem(name: str, built_in: tuple[str, ...]) -> str | None:
    """Why `name` cannot name a user profile; None when it can."""
    if name in built_in:
        return f"{name!r} is a built-in profile"
    if not NAME.fullmatch(name):
        return f"{name[:64]!r} is not a profile name (a lowercase letter, then up to 31 of a-z, 0-9, _ and -)"
    return None


def record_path(directory: Path, name: str) -> Path:
    return directory / f"{PREFIX}{name}.json"


def lock_path(directory: Path, name: str) -> Path:
    return directory / f"{PREFIX}{name}.lock"


def tree_path(directory: Path, name: str, lock_sha256: str) -> Path:
    return directory / f"{PREFIX}{name}-{lock_sha256[:32]}"


@dataclass(frozen=True)
class StoredProfile:
    """A user profile as found in a cache directory, checked."""

    name: str
    base: str
    lock: bytes
    tree: Path
    packages: tuple[tuple[str, str], ...]

    def identity(self, base_image: str) -> str:
        """The profile's ``sha256:``: its base image's and its lock's (what the guest gets is both)."""
        digest = hashlib.sha256(f"wasmexec user profile {RECIPE}\0{base_image}\0".encode() + self.lock)
        return "sha256:" + digest.hexdigest()


def find(directory: Path, name: str) -> StoredProfile | None:
    """The profile `name` in `directory`; None when missing, damaged or not trusted."""
    record = trust.read_record(record_path(directory, name))
    lock = trust.read_trusted(lock_path(directory, name))
    if record is None or lock is None or record.get("name") != name or not isinstance(record.get("base"), str):
        return None
    lock_sha256 = hashlib.sha256(lock).hexdigest()
    tree = tree_path(directory, name, lock_sha256)
    if record.get("lock_sha256") != lock_sha256 or os.path.islink(tree) or trust.directory_problem(tree) is not None:
        return None
    listed = record.get("packages")
    packages = tuple((str(item[0]), str(item[1])) for item in listed if isinstance(item, list) and len(item) == 2) \
        if isinstance(listed, list) else ()  # fmt: skip
    return StoredProfile(name, record["base"], lock, tree, packages)


def names(directory: Path) -> list[str]:
    """The user profiles recorded in `directory` (by their record's file name; not checked)."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    found = (re.fullmatch(rf"{PREFIX}({NAME.pattern})\.json", entry) for entry in entries)
    return sorted(match.group(1) for match in found if match is not None)
