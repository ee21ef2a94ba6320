"""Wheels written with the stdlib only (zipfile), for user-profile builds that need no network."""

from __future__ import annotations

import os
from pathlib import Path

from wasmexec._userprofile.wheels import write_wheel as make_wheel

__all__ = ["linked_cache", "make_wheel"]


def linked_cache(source: Path, image: str, target: Path) -> Path:
    """`target` made a cache dir holding `source`'s built and compiled image `image` as hard links (same
    inodes: the trust checks and records hold), so a user profile builds there without building its base."""
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    short = image.removeprefix("sha256:")[:32]
    for path in source.iterdir():
        if short in path.name and path.is_file() and not (target / path.name).exists():
            os.link(path, target / path.name)
    return target
