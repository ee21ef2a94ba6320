"""The guest's sources, what identifies a build of them, and the build itself.

In a wheel, `bridge/` and `wasm_assets/` are packaged as ``wasmexec/_guest/``; in
a source checkout they sit beside the package.

Two builds of the same sources do not give the same component bytes: componentize-py
pre-initializes the interpreter (a memory snapshot) under a WASI context of its own,
with OS randomness, so CPython's string-hash secret, the dict and set layouts that
follow from it and `random`'s state differ from build to build (observed: the same
sources, two builds, two values of ``hash('abc')``, 25.46 vs 25.40 MB). Neither the
environment nor the command line reaches that context. So the image is named by its
inputs instead: `GuestSources.identity` is a sha256 over the build recipe, the
componentize-py version, the tzdata version and every source file, and that is the
run result's ``sandbox_image``. The build reads only a staged copy of exactly the
files that were hashed, and no host site-packages.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from wasmexec._exceptions import BuildError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # wasmexec/

#: The WIT world the guest implements (wasm_assets/wit/world.wit).
WORLD = "sandbox"
#: The componentize-py app module in bridge/.
APP_MODULE = "app"
#: The componentize-py release the guest is written for (pinned in pyproject.toml).
BUILDER_VERSION = "0.25.1"
#: Part of every image's identity: bump it when the build invocation below changes.
BUILD_RECIPE = "2"
#: A build takes about 15 s; a hung builder must not hang the host forever.
BUILD_TIMEOUT_S = 600
#: Lines of the builder's output kept in a BuildError.
_ERROR_TAIL_LINES = 15


@dataclass(frozen=True)
class GuestSources:
    """The directories a guest component is built from."""

    bridge_dir: Path
    wit_dir: Path

    def files(self) -> list[tuple[str, Path]]:
        """Every file that goes into the component as (stable name, path), sorted."""
        found = [
            (f"{label}/{path.relative_to(root).as_posix()}", path)
            for label, root in (("bridge", self.bridge_dir), ("wit", self.wit_dir))
            for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".wit")
        ]
        return sorted(found)

    def identity(self) -> str:
        """The sha256 (hex) that names a build of these sources: the ``sandbox_image``."""
        return _identity((name, path.read_bytes()) for name, path in self.files())

    def stage(self, target: Path) -> str:
        """Copies the sources and tzdata into `target` for a build; returns the copy's identity.

        The build reads the copy, so what was hashed is what was built even if the sources
        change meanwhile, and the build never writes (``__pycache__``) into the package.
        """
        contents = [(name, path.read_bytes()) for name, path in self.files()]
        for name, data in contents:
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(data)
        shutil.copytree(_tzdata_dir(), target / "extra" / "tzdata", ignore=shutil.ignore_patterns("__pycache__"))
        return _identity(contents)


def _identity(contents: Iterable[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256(f"wasmexec guest recipe {BUILD_RECIPE}\0{builder_version()}\0".encode())
    for name, data in contents:
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


@cache
def builder_version() -> str:
    """What else decides the component's content: the componentize-py and tzdata releases."""
    return f"componentize-py {_componentize_py_version()}; tzdata {_tzdata_version()}"


def _componentize_py_version() -> str:
    """The installed version, read from its dist-info name (importlib.metadata costs 20 ms, a glob 0.6 ms).

    The pin when it is not installed: a shipped artifact dir is then still found.
    """
    spec = importlib.util.find_spec("componentize_py")
    if spec is None or spec.origin is None:
        return BUILDER_VERSION
    site = Path(spec.origin).parent.parent
    if (site / f"componentize_py-{BUILDER_VERSION}.dist-info").is_dir():
        return BUILDER_VERSION
    found = sorted(site.glob("componentize_py-*.dist-info"))
    return found[-1].name.removeprefix("componentize_py-").removesuffix(".dist-info") if found else BUILDER_VERSION


def _tzdata_version() -> str:
    try:
        import tzdata  # type: ignore[import-untyped]
    except ImportError:
        return "missing"
    return f"{getattr(tzdata, '__version__', '?')} ({tzdata.IANA_VERSION})"


def _tzdata_dir() -> Path:
    spec = importlib.util.find_spec("tzdata")
    if spec is None or spec.origin is None:
        raise BuildError("the tzdata package is missing; it is a dependency of wasmexec (pip install tzdata)")
    return Path(spec.origin).parent


def componentize(staged: Path, output: Path) -> None:
    """Builds the component from a `GuestSources.stage` copy into `output`; raises BuildError."""
    import subprocess  # here: every start imports this module, a build is once per machine

    command = [
        sys.executable, "-c",
        "import sys, componentize_py; sys.argv[0] = 'componentize-py'; sys.exit(componentize_py.script())",
        "-d", "wit", "-w", WORLD, "componentize", APP_MODULE, "-p", "bridge", "-p", "extra", "-o", str(output),
    ]  # fmt: skip
    # componentize-py adds the site-packages of $VIRTUAL_ENV, else of `pipenv --venv`, else of
    # `python3`, to the guest's module path: point it at an empty one so that nothing of the
    # host's packages can reach the snapshot.
    empty_venv = staged / "no-venv"
    (empty_venv / "lib" / "site-packages").mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["VIRTUAL_ENV"] = str(empty_venv)
    try:
        completed = subprocess.run(
            command, cwd=staged, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"componentize-py could not run: {exc}") from exc
    if completed.returncode != 0 or not output.is_file():
        tail = "\n".join((completed.stderr or completed.stdout).strip().splitlines()[-_ERROR_TAIL_LINES:])
        raise BuildError(f"componentize-py failed (exit {completed.returncode}):\n{tail}")


@cache
def guest_sources() -> GuestSources:
    """Locates bridge/ and wasm_assets/wit/ (wheel layout first, then the checkout)."""
    for base in (_PACKAGE_DIR / "_guest", _PACKAGE_DIR.parent):
        bridge, wit = base / "bridge", base / "wasm_assets" / "wit"
        if (bridge / f"{APP_MODULE}.py").is_file() and (wit / "world.wit").is_file():
            return GuestSources(bridge, wit)
    raise FileNotFoundError(f"the guest sources (bridge/, wasm_assets/) are missing next to {_PACKAGE_DIR}")
