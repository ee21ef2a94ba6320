"""``wasmexec build --profile NAME --requirements FILE``: a user profile made and stored in the cache dir.

The base image is built (and compiled) first; then pip resolves the requirements for the base's
Python (`wasmexec._userprofile.wheels`), every wheel is checked, the lock is written and the
wheels are unpacked into the profile's tree (`wasmexec._userprofile.profile_store`) and compiled
to bytecode by the base's Python (`wasmexec._userprofile.bytecode`). When a lock from the same
requirements file and base exists, exactly its pins are downloaded again and a wheel whose hash
differs is refused. Whatever is found at the tree's path and fails the trust checks (a folder or
file open to others, a symbolic link) is moved aside, never followed, and replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError
from wasmexec._sandbox import registry, trust
from wasmexec._sandbox.image_cache import Progress, atomic_write, locked
from wasmexec._sandbox.runtime import ImageRuntime
from wasmexec._userprofile import bytecode, wheels
from wasmexec._userprofile import profile_store as store


def build_profile(
    name: str,
    requirements: Path,
    base: str = registry.DEFAULT_PROFILE,
    find_links: Path | None = None,
    cache_dir: Path | str | None = None,
    progress: Progress | None = None,
) -> ImageRuntime[Any]:
    """Builds user profile `name` from a requirements file on `base`; returns its runtime.

    Raises:
        ValueError: a bad name or base, a requirements file or --find-links folder that cannot be read.
        BuildError: a requirement that cannot be resolved, has compiled code, or differs from its lock.
    """
    say: Progress = progress or (lambda message: None)
    problem = store.name_problem(name, registry.PROFILES)
    if problem is not None:
        raise ValueError(f"cannot build a profile named {name[:64]!r}: {problem}")
    if not registry.is_built_in(base):
        raise ValueError(f"--base must be a built-in profile ({', '.join(registry.PROFILES)}), not {base[:64]!r}")
    try:
        requested = requirements.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the requirements file {requirements}: {exc.strerror or exc}") from exc
    if find_links is not None and not find_links.is_dir():
        raise ValueError(f"--find-links {find_links} is not a directory")
    base_runtime = registry.runtime(base, cache_dir, progress)
    base_runtime.build()  # the base built and compiled for both limit modes: a no-op when it is
    described, base_image = base_runtime.describe(), base_runtime.sandbox_image
    python = described.python
    directory = base_runtime.artifacts.writable_directory()
    header = f"# wasmexec profile {name} on {base}; requirements sha256 {hashlib.sha256(requested).hexdigest()}\n"
    lock_path = store.lock_path(directory, name)
    previous = trust.read_trusted(lock_path)
    pinned = previous is not None and previous.startswith(header.encode())
    # ignore_cleanup_errors: a replaced tree with folders of another user's may not go away (cache clean tries again)
    with tempfile.TemporaryDirectory(dir=directory, prefix=f".{store.PREFIX}{name}.",
                                     ignore_cleanup_errors=True) as scratch_name:  # fmt: skip
        scratch = Path(scratch_name)
        (scratch / "wheels").mkdir()
        provided = wheels.stub_provided(((p.name, p.version) for p in described.packages), scratch / "provided")
        if pinned and previous is not None:
            say(f"wasmexec: downloading the packages pinned in {lock_path}...")
            pins = wheels.parse_lock(previous.decode("utf-8", "replace"))
            (scratch / "pins.txt").write_text("".join(f"{pin}=={version}\n" for pin, (version, _) in pins.items()))
            found = wheels.download(scratch / "pins.txt", python, scratch / "wheels", find_links, True,
                                    registry.CARRIED, provided)  # fmt: skip
            wheels.check_pins(found, pins, lock_path)
        else:
            say(f"wasmexec: resolving {requirements} for Python {python} (pure-Python wheels only)...")
            found = wheels.download(requirements, python, scratch / "wheels", find_links, False, registry.CARRIED,
                                    provided)  # fmt: skip
        found.sort(key=lambda wheel: wheels.normalized(wheel.name))
        lock = (header + "".join(wheel.lock_line() + "\n" for wheel in found)).encode()
        packages = tuple((wheel.name, wheel.version) for wheel in found)
        staged = store.StoredProfile(name, base, base_image, lock, scratch / "tree", packages)
        tree = store.tree_path(directory, name, staged.identity)
        record = {"name": name, "base": base, "base_image": base_image, "lock_sha256": hashlib.sha256(lock).hexdigest(),
                  "packages": [list(package) for package in packages]}  # fmt: skip
        if store.tree_problem(tree) is not None:  # else it is this very tree, built before
            staged.tree.mkdir()
            wheels.unpack(found, staged.tree)
            say(f"wasmexec: compiling the packages to bytecode for Python {python}...")
            bytecode.compile_tree(staged, base_runtime.image)
            wheels.settle_modes(staged.tree)
        with locked(directory):
            if store.tree_problem(tree) is not None:
                _replace(tree, staged.tree, scratch / "replaced")
            atomic_write(lock_path, lock)
            atomic_write(store.record_path(directory, name), json.dumps(record, indent=2).encode())
    say(f"wasmexec: profile {name}: {', '.join(f'{w.name} {w.version}' for w in found) or 'no packages'}; "
        f"lock {lock_path}")  # fmt: skip
    return registry.runtime(name, cache_dir, progress)


def _replace(tree: Path, new: Path, aside: Path) -> None:
    """Puts `new` at `tree`; what is there (a folder, a file, a symbolic link: never followed) goes `aside`."""
    try:
        if os.path.lexists(tree):
            os.rename(tree, aside)
        os.replace(new, tree)
    except OSError as exc:
        raise BuildError(f"cannot replace {tree} ({exc.strerror or exc}): remove it and build again") from exc
