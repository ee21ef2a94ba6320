"""Disk footprint: what `pip install wasmexec` and the science extra install, and what each image caches (issue 9).

Run in a venv with the science extra (so both closures are installed), after `wasmexec build` and
`wasmexec build --profile science`::

    .venv-science/bin/python benchmarks/bench_disk.py              # a few seconds
    .venv-science/bin/python benchmarks/bench_disk.py --cache-dir DIR

Install: the dependency closure of ``wasmexec`` (its ``Requires-Dist`` without extras, walked through
``importlib.metadata``), then what ``wasmexec[science]`` adds; each distribution's size is the sum of
the files its RECORD lists (what ``pip`` wrote; byte sizes, not disk blocks). Cache: this install's
current files of each image in the cache directory (`wasmexec._sandbox.cachedir`), plus the stale
files of other images and versions that `wasmexec cache clean` would remove.
"""

from __future__ import annotations

import argparse
import re
from importlib import metadata
from pathlib import Path

from wasmexec._sandbox.cachedir import current, human, inventory
from wasmexec._sandbox.image_cache import default_cache_dir

_MB = 1e6


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist: metadata.Distribution, extra: str | None) -> list[str]:
    """The names `dist` requires (with `extra`: only the extra's own), markers evaluated for this machine."""
    from packaging.requirements import Requirement

    names = []
    for line in dist.requires or []:
        requirement = Requirement(line)
        environment = {"extra": extra or ""}
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if extra is not None and (requirement.marker is None or "extra" not in str(requirement.marker)):
            continue
        names.append(requirement.name)
    return names


def closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """Every installed distribution `names` need, transitively (by normalized name)."""
    found: dict[str, metadata.Distribution] = {}
    pending = list(names)
    while pending:
        name = _key(pending.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = dist
        pending.extend(_requirements(dist, None))
    return found


def installed_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir())
    args = parser.parse_args()

    core = closure(["wasmexec"])
    science = closure(["wasmexec", *_requirements(metadata.distribution("wasmexec"), "science")])
    sizes = {name: installed_bytes(dist) for name, dist in science.items()}
    print("## install (bytes of the files each distribution's RECORD lists)")
    core_total = sum(sizes.get(name, installed_bytes(dist)) for name, dist in core.items())
    largest = sorted(core, key=lambda name: -sizes.get(name, 0))[:5]
    print(f"pip install wasmexec: {core_total / _MB:.1f} MB in {len(core)} distributions; largest: "
          + ", ".join(f"{name} {sizes.get(name, 0) / _MB:.1f} MB" for name in largest))  # fmt: skip
    extra = {name: sizes[name] for name in science if name not in core}
    biggest = sorted(extra.items(), key=lambda item: -item[1])
    print(f"the science extra adds: {sum(extra.values()) / _MB:.1f} MB in {len(extra)} distributions: "
          + ", ".join(f"{name} {size / _MB:.1f} MB" for name, size in biggest))  # fmt: skip

    print(f"\n## cache ({args.cache_dir})")
    entries = inventory(args.cache_dir, current())
    for kind in ("default", "science", "stale"):
        found = [entry for entry in entries if entry.kind == kind]
        print(f"{kind}: {human(sum(entry.size for entry in found))} in {len(found)} entries")
        if kind != "stale":
            for entry in sorted(found, key=lambda entry: -entry.size):
                print(f"    {entry.path.name}: {human(entry.size)}")


if __name__ == "__main__":
    main()
