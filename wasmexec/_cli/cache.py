"""`wasmexec cache …`: what the artifact cache holds, and removing what this install no longer uses.

    wasmexec cache [info] [--cache-dir DIR]          disk usage: this install's images, stale files, others
    wasmexec cache clean [--dry-run] [--cache-dir DIR]   removes the stale files, listing each with its size

Stale: other images (an older bridge or recipe), other wasmtime versions or engine formats,
and unfinished writes (`wasmexec._sandbox.cachedir`). This install's images are never
removed; another install sharing the directory rebuilds what it needs (the science image
with ``wasmexec build --profile science``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmexec._cli.options import CACHE_DIR_ENV, EXIT_OK, EXIT_SANDBOX, add_cache_dir_option

if TYPE_CHECKING:
    from wasmexec._sandbox.cachedir import CacheEntry


def add_cache_parser(commands: Any) -> None:
    cache = commands.add_parser(
        "cache",
        help="show the artifact cache's disk usage; 'cache clean' removes what this install no longer uses",
        description="Show what the artifact cache holds: this install's images, stale files (other images, "
        "other wasmtime versions, unfinished writes) and other files.",
    )
    add_cache_dir_option(cache)
    cache.set_defaults(handler=command_cache, parser=cache)
    actions = cache.add_subparsers(dest="action", metavar="ACTION")
    info = actions.add_parser("info", help="disk usage by kind (also what plain 'wasmexec cache' shows)",
                              description=cache.description)  # fmt: skip
    add_cache_dir_option(info)
    info.set_defaults(handler=command_cache, parser=info)
    clean = actions.add_parser(
        "clean",
        help="remove the stale files, listing each",
        description="Remove the cache's stale files: other images, other wasmtime versions or engine formats, and "
        "unfinished writes. This install's images are kept.",
    )
    clean.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    add_cache_dir_option(clean)
    clean.set_defaults(handler=command_clean, parser=clean)


def cache_dir(args: argparse.Namespace) -> Path:
    """--cache-dir, else WASMEXEC_CACHE_DIR, else the per-user cache dir."""
    from wasmexec._sandbox.image_cache import default_cache_dir

    chosen = args.cache_dir or os.environ.get(CACHE_DIR_ENV)
    return Path(chosen) if chosen else default_cache_dir()


def command_cache(args: argparse.Namespace) -> int:
    from wasmexec._sandbox.cachedir import current, inventory

    directory = cache_dir(args)
    entries = inventory(directory, current(directory))
    print(f"cache {directory}: {_total(entries)}")
    for line in usage_lines(entries):
        print(f"  {line}")
    return EXIT_OK


def usage_lines(entries: Iterable[CacheEntry]) -> list[str]:
    """One line per kind: this install's images, stale files (and how to remove them), other files."""
    from wasmexec._sandbox.cachedir import human
    from wasmexec._sandbox.registry import PROFILES

    yours = sorted({entry.kind for entry in entries} - {*PROFILES, "stale", "other"})
    labels = {**{profile: f"{profile} image (this install)" for profile in PROFILES},
              **{name: f"{name} profile (yours)" for name in yours},
              "stale": "stale (wasmexec cache clean removes them)", "other": "other files (kept)"}  # fmt: skip
    kinds: dict[str, list[CacheEntry]] = {kind: [] for kind in labels}
    for entry in entries:
        kinds[entry.kind].append(entry)
    lines = []
    for kind, label in labels.items():
        found = kinds[kind]
        size = human(sum(entry.size for entry in found))
        lines.append(f"{label}: {size} in {len(found)} entr{'y' if len(found) == 1 else 'ies'}" if found else
                     f"{label}: none")  # fmt: skip
    return lines


def cache_usage(directory: Path) -> None:
    """The disk usage lines of `wasmexec cache`, on stderr (after a build)."""
    from wasmexec._sandbox.cachedir import current, inventory

    entries = inventory(directory, current(directory))
    print(f"wasmexec: cache {directory}: {_total(entries)}", file=sys.stderr)
    for line in usage_lines(entries):
        print(f"wasmexec:   {line}", file=sys.stderr)


def command_clean(args: argparse.Namespace) -> int:
    from wasmexec._sandbox.cachedir import clean, current, human

    directory = cache_dir(args)
    try:
        removed = clean(directory, current(directory), dry_run=args.dry_run)
    except OSError as exc:
        print(f"wasmexec: error: cannot clean {directory}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_SANDBOX
    verb = "would remove" if args.dry_run else "removed"
    for entry in removed:
        print(f"{verb} {entry.path} ({human(entry.size)}; {entry.why})")
    print(f"{verb} {len(removed)} entr{'y' if len(removed) == 1 else 'ies'}, {_total(removed)}, from {directory}")
    return EXIT_OK


def _total(entries: Iterable[CacheEntry]) -> str:
    from wasmexec._sandbox.cachedir import human

    return human(sum(entry.size for entry in entries))
