"""Wheels written with the stdlib only (zipfile), for user-profile builds that need no network."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from collections.abc import Iterable
from pathlib import Path


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    files: dict[str, str | bytes],
    tag: str = "py3-none-any",
    requires: Iterable[str] = (),
) -> Path:
    """Writes ``<name>-<version>-<tag>.whl`` into `directory` holding `files` (path → content) and its
    dist-info (METADATA, WHEEL, RECORD); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    distribution = name.replace("-", "_")
    info = f"{distribution}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires
    )
    pure = "true" if tag.endswith("-none-any") else "false"
    contents: dict[str, bytes] = {
        path: content.encode() if isinstance(content, str) else content for path, content in files.items()
    }
    contents[f"{info}/METADATA"] = metadata.encode()
    contents[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: {pure}\nTag: {tag}\n".encode()
    record = "".join(f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in contents.items())
    contents[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = directory / f"{distribution}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in contents.items():
            archive.writestr(member, data)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def linked_cache(source: Path, image: str, target: Path) -> Path:
    """`target` made a cache dir holding `source`'s built and compiled image `image` as hard links (same
    inodes: the trust checks and records hold), so a user profile builds there without building its base."""
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    short = image.removeprefix("sha256:")[:32]
    for path in source.iterdir():
        if short in path.name and path.is_file() and not (target / path.name).exists():
            os.link(path, target / path.name)
    return target
