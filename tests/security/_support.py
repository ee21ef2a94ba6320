"""Helpers for the break-out tests: run code with chosen limits, time it, check the host survived."""

from __future__ import annotations

import time
from typing import Any

from tests.helpers import data_of
from wasmexec import Limits, Runtime, Sandbox

#: Removes codemode's import blocker (a convenience layer, not the boundary), so tests can
#: show that the layer underneath (WASI with an empty context) holds on its own.
UNBLOCK_IMPORTS = "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_BlockedFinder']\n"

#: Exception types a failed import may surface as.
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "SandboxImportError"}


def run(runtime: Runtime, code: str, **limits: Any) -> dict[str, Any]:
    """Runs `code` in a fresh sandbox (10 s timeout unless given) and returns the run result."""
    limits.setdefault("timeout_ms", 10_000)
    result = Sandbox(Limits(**limits), runtime=runtime).run_sync(code)
    return dict(result)


def timed_run(runtime: Runtime, code: str, **limits: Any) -> tuple[dict[str, Any], float]:
    """Like `run`, and also returns the wall time the host spent in seconds."""
    started = time.monotonic()
    result = run(runtime, code, **limits)
    return result, time.monotonic() - started


def assert_host_survives(runtime: Runtime) -> None:
    """A fresh run on the same runtime still works and sees a pristine interpreter."""
    check = "import builtins, os, sys\nresult = [1 + 1, hasattr(builtins, 'x'), dict(os.environ)]"
    assert data_of(run(runtime, check)) == [2, False, {}]
