"""A user profile's packages: resolved and downloaded by pip, checked, pinned in a lock, unpacked.

Only pure-Python wheels (``py3-none-any``) can run in the sandbox: there is no native code in
WebAssembly but what the image was built with. pip is asked for wheels that fit any platform
(``--only-binary=:all: --platform any --abi none --implementation py``) for the base image's
Python, so a package that has both picks the pure one; what has none (compiled only, or an
sdist that would need building) is refused naming it. Every downloaded wheel is checked again
here: its tag, and that it holds no ``.so``/``.pyd``/``.dylib``.

What the base image already has (the science image's numpy, pandas, ...) is offered to pip as an
empty pure wheel of exactly the base's version (`stub_provided`), so a package that depends on
it resolves to the base's copy, and no such wheel is ever unpacked or locked.

The lock (``name==version --hash=sha256:...``, one line each, pip's own format) pins what was
resolved; a rebuild from the same requirements downloads exactly the pinned files and refuses
one whose hash differs. Unpacking never writes outside the tree (no absolute or ``..`` names).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wasmexec._exceptions import BuildError

#: pip's resolve and download: a stuck index must not hang the build forever.
PIP_TIMEOUT_S = 600
#: Lines of pip's output kept in a BuildError.
_ERROR_TAIL_LINES = 12
#: Suffixes of native code, which WebAssembly cannot load.
_NATIVE_SUFFIXES = (".so", ".pyd", ".dylib", ".dll")
#: A wheel's file name: name-version(-build)?-python-abi-platform.whl (PEP 427).
_WHEEL_NAME = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl")
_LOCK_LINE = re.compile(r"(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^\s]+)\s+--hash=sha256:(?P<sha256>[0-9a-f]{64})")
_NO_MATCH = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)")


@dataclass(frozen=True)
class Wheel:
    """One downloaded, checked wheel."""

    path: Path
    name: str
    version: str
    sha256: str

    def lock_line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, tuple[str, str]]:
    """The lock's pins: normalized name → (version, sha256); comments and blank lines skipped."""
    pins = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        found = _LOCK_LINE.fullmatch(line)
        if found is None:
            raise BuildError(f"the lock has a line wasmexec did not write: {line[:200]!r}")
        pins[normalized(found["name"])] = (found["version"], found["sha256"])
    return pins


def write_wheel(
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
    contents = {path: content.encode() if isinstance(content, str) else content for path, content in files.items()}
    contents[f"{info}/METADATA"] = metadata.encode()
    contents[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: wasmexec\nRoot-Is-Purelib: {pure}\nTag: {tag}\n".encode()
    )
    record = "".join(f"{path},sha256={_record_digest(data)},{len(data)}\n" for path, data in contents.items())
    contents[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = directory / f"{distribution}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in contents.items():
            archive.writestr(member, data)
    return path


def _record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def stub_provided(packages: Iterable[tuple[str, str]], directory: Path) -> Path:
    """Writes into `directory` an empty wheel per package the base image has, and ``constraints.txt``
    pinning each to the base's version; returns `directory` (`download`'s `provided`)."""
    directory.mkdir(parents=True, exist_ok=True)
    pins = []
    for name, version in packages:
        write_wheel(directory, name, version, {})
        pins.append(f"{name}=={version}\n")
    (directory / "constraints.txt").write_text("".join(pins))
    return directory


def download(
    requirements: Path,
    python: str,
    dest: Path,
    find_links: Path | None,
    pinned: bool,
    carried: dict[str, str],
    provided: Path | None = None,
) -> list[Wheel]:
    """Resolves `requirements` (a lock when `pinned`: exactly its files, no dependencies) into `dest`
    with pip, then checks every wheel. `carried`: package → the built-in profile that has it;
    `provided`: what the base image has (`stub_provided`), left out of what is returned."""
    command = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--retries", "1",
        "--only-binary=:all:", "--implementation", "py", "--abi", "none", "--platform", "any",
        "--python-version", python, "--dest", str(dest), "-r", str(requirements),
    ]  # fmt: skip
    if pinned:
        command.append("--no-deps")
    if find_links is not None:
        command += ["--no-index", "--find-links", str(find_links)]
    base_has: set[str] = set()
    if provided is not None:
        command += ["--find-links", str(provided), "--constraint", str(provided / "constraints.txt")]
        base_has = {normalized(path.name.split("-")[0]) for path in provided.glob("*.whl")}
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"pip could not run: {exc}") from exc
    if completed.returncode != 0:
        raise _pip_failure(completed.stdout + completed.stderr, find_links, carried)
    downloaded = (path for path in sorted(dest.iterdir()) if normalized(path.name.split("-")[0]) not in base_has)
    return [check_wheel(path, carried) for path in downloaded]


def _pip_failure(output: str, find_links: Path | None, carried: dict[str, str]) -> BuildError:
    if re.search(r"NewConnectionError|Network is unreachable|Temporary failure in name resolution|"
                 r"Failed to establish a new connection|ConnectionError|ProxyError", output):  # fmt: skip
        return BuildError(
            "cannot reach the package index (no network?); give local wheels with --find-links DIR, "
            "which builds without the index"
        )
    missing = _NO_MATCH.search(output)
    if missing is not None:
        name = missing.group(1)
        where = f"in {find_links}" if find_links is not None else "on the package index"
        found = sorted(path.name for path in find_links.glob("*") if _same_name(path.name, name)) if find_links else []
        seen = f" (found only: {', '.join(found)})" if found else ""
        return BuildError(
            f"{name}: no pure-Python wheel (py3-none-any) {where}{seen}; a package with compiled code, or one "
            f"that must be built from source, cannot run in the sandbox{_carried_hint(name, carried)}"
        )
    tail = "\n".join(output.strip().splitlines()[-_ERROR_TAIL_LINES:])
    return BuildError(f"pip could not resolve the requirements:\n{tail}")


def _same_name(file_name: str, name: str) -> bool:
    found = _WHEEL_NAME.fullmatch(file_name)
    base = found["name"] if found else re.split(r"-\d", file_name, maxsplit=1)[0]
    return normalized(base) == normalized(name)


def _carried_hint(name: str, carried: dict[str, str]) -> str:
    profile = carried.get(normalized(name))
    return f"; the {profile} profile already has {name} (--base {profile})" if profile else ""


def check_wheel(path: Path, carried: dict[str, str]) -> Wheel:
    """The wheel at `path`, refused (`BuildError` naming it) unless pure Python."""
    found = _WHEEL_NAME.fullmatch(path.name)
    if found is None:
        raise BuildError(f"{path.name}: not a wheel (a source distribution would need building); only "
                         "pure-Python wheels can be installed")  # fmt: skip
    name, version = found["name"], found["version"]
    if not any(tag.endswith("-none-any") and tag.split("-")[0].startswith("py") for tag in _expand(found["tags"])):
        raise BuildError(f"{name} {version}: {path.name} has compiled code (not py3-none-any), which cannot run "
                         f"in the sandbox{_carried_hint(name, carried)}")  # fmt: skip
    try:
        with zipfile.ZipFile(path) as archive:
            native = [member for member in archive.namelist() if member.lower().endswith(_NATIVE_SUFFIXES)]
    except (OSError, zipfile.BadZipFile) as exc:
        raise BuildError(f"{path.name} is not a readable wheel: {exc}") from exc
    if native:
        raise BuildError(f"{name} {version}: {path.name} holds native code ({native[0]}), which cannot run in "
                         f"the sandbox{_carried_hint(name, carried)}")  # fmt: skip
    return Wheel(path, name, version, hashlib.sha256(path.read_bytes()).hexdigest())


def _expand(tags: str) -> list[str]:
    """A compressed tag set (``py2.py3-none-any``) as single tags."""
    python, abi, platform = tags.split("-")
    return [f"{p}-{a}-{q}" for p in python.split(".") for a in abi.split(".") for q in platform.split(".")]


def check_pins(wheels: list[Wheel], pins: dict[str, tuple[str, str]], lock: Path) -> None:
    """Every wheel is the one the lock pins (same version and sha256), and every pin has its wheel."""
    for wheel in wheels:
        pin = pins.get(normalized(wheel.name))
        if pin is None or pin != (wheel.version, wheel.sha256):
            raise BuildError(f"{wheel.name} {wheel.version}: {wheel.path.name} does not match the hash pinned in "
                             f"{lock}; refused (delete the lock to resolve again)")  # fmt: skip
    missing = pins.keys() - {normalized(wheel.name) for wheel in wheels}
    if missing:
        raise BuildError(f"the lock {lock} pins {', '.join(sorted(missing))}, which pip did not download")


def unpack(wheels: list[Wheel], tree: Path) -> None:
    """Unpacks the wheels into `tree` (purelib and platlib at its root; scripts, headers and data dropped)."""
    for wheel in wheels:
        with zipfile.ZipFile(wheel.path) as archive:
            for member in archive.infolist():
                target = _target(tree, member.filename)
                if target is None or member.is_dir():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink)


def settle_modes(tree: Path) -> None:
    """Makes everything in `tree` readable by all and writable by its owner only: the trust checks' rule."""
    for path in [tree, *tree.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def _target(tree: Path, name: str) -> Path | None:
    """Where a wheel member goes (None: dropped); a `BuildError` for a name that would leave the tree."""
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or "\\" in name or any(part in ("..", "") for part in parts) or ":" in name:
        raise BuildError(f"a wheel holds a file named {name[:200]!r}, which would land outside its folder")
    if parts[0].endswith(".data"):
        if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
            return None
        parts = parts[2:]
    return tree.joinpath(*parts)
