"""Where a user profile lives in a cache directory, and reading it back with the trust checks.

A user profile is a base image plus a package tree plus its lock::

    profile-<name>.json          its record: name, base profile and image, the lock's sha256, the packages
    profile-<name>.lock          the lock: ``name==version --hash=sha256:...`` per wheel
    profile-<name>-<identity>/   the unpacked packages and their bytecode for the base image's Python
                                 (``<identity>``: the profile's, 32 hex digits: base image and lock)

The guest reads the tree, read-only, as it was written: like a compiled image, it is used only
when nobody but you (or root) could have put it there (`wasmexec._sandbox.trust`): the record
and the lock are regular files, the tree a directory, each owned by you or root and writable by
no one else, and so is every file and folder in the tree (a ``.pyc`` runs as its source does, so
neither is trusted more); no symbolic links; and the lock's sha256 is the record's. A rebuild
writes a new tree and then the lock and the record (each renamed into place), so a reader sees
the old profile or the new one.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from wasmexec._exceptions import BuildError
from wasmexec._sandbox import trust

#: A profile's name: a file-name-safe word that a shell and a JSON enum take as it is.
NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: Part of every user profile's identity: bump it when what the guest is given changes.
RECIPE = "2"  # 2: the tree holds bytecode compiled at build time
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


def tree_path(directory: Path, name: str, identity: str) -> Path:
    return directory / f"{PREFIX}{name}-{identity.removeprefix('sha256:')[:32]}"


def identity(base_image: str, lock: bytes) -> str:
    """A user profile's ``sha256:``: its base image's and its lock's (what the guest gets is both: the
    packages, and their bytecode compiled by the base image's Python)."""
    digest = hashlib.sha256(f"wasmexec user profile {RECIPE}\0{base_image}\0".encode() + lock)
    return "sha256:" + digest.hexdigest()


def rebuild_hint(name: str) -> str:
    return f"rebuild it with `wasmexec build --profile {name} --requirements FILE`"


def tree_problem(tree: Path) -> str | None:
    """Why someone else could have changed what the guest reads in `tree`: the folder, and every file and
    folder in it (the trust checks of `wasmexec._sandbox.trust`, and no symbolic links); None when nobody could."""
    if os.path.islink(tree):
        return f"{tree} is a symbolic link"
    problem = trust.directory_problem(tree)
    if problem is not None:
        return f"{tree} {problem}"
    for folder, folders, files in os.walk(tree):
        for entry in (*folders, *files):
            path = os.path.join(folder, entry)
            try:
                info = os.lstat(path)
            except OSError as exc:
                return f"{path} cannot be read ({exc.strerror or exc})"
            if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                return f"{path} is not a regular file or folder"
            problem = trust.owner_problem(info)
            if problem is not None:
                return f"{path} {problem}"
    return None


@dataclass(frozen=True)
class StoredProfile:
    """A user profile as found in a cache directory, checked."""

    name: str
    base: str
    base_image: str
    """The ``sha256:`` of the base image it was built on (whose Python compiled its bytecode)."""
    lock: bytes
    tree: Path
    packages: tuple[tuple[str, str], ...]

    @property
    def identity(self) -> str:
        return identity(self.base_image, self.lock)


def find(directory: Path, name: str) -> StoredProfile | None:
    """The profile `name` in `directory`; None when it has no record; a `BuildError` saying why when it
    is damaged or not trusted."""
    path = record_path(directory, name)
    if not os.path.lexists(path):
        return None
    record = trust.read_record(path)
    lock = trust.read_trusted(lock_path(directory, name))
    base, base_image = (record.get("base"), record.get("base_image")) if record is not None else (None, None)
    if record is None or lock is None or record.get("name") != name or not isinstance(base, str) or not (
            isinstance(base_image, str) and trust.is_sha256(base_image.removeprefix("sha256:"))):  # fmt: skip
        raise BuildError(f"profile {name}: its record {path} or lock is missing, damaged or open to other "
                         f"users; {rebuild_hint(name)}")  # fmt: skip
    tree = tree_path(directory, name, identity(base_image, lock))
    locked = record.get("lock_sha256") == hashlib.sha256(lock).hexdigest()
    problem = tree_problem(tree) if locked else "its lock is not the one its record names"
    if problem is not None:
        raise BuildError(f"profile {name}: its packages are not used, because {problem}; {rebuild_hint(name)}")
    listed = record.get("packages")
    packages = tuple((str(item[0]), str(item[1])) for item in listed if isinstance(item, list) and len(item) == 2) \
        if isinstance(listed, list) else ()  # fmt: skip
    return StoredProfile(name, base, base_image, lock, tree, packages)


def names(directory: Path) -> list[str]:
    """The user profiles recorded in `directory` (by their record's file name; not checked)."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    found = (re.fullmatch(rf"{PREFIX}({NAME.pattern})\.json", entry) for entry in entries)
    return sorted(match.group(1) for match in found if match is not None)
