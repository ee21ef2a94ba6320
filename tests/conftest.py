"""Shared fixtures: one real runtime (real component, real wasmtime) for the whole session.

The suite never writes to the user's own state: the audit log and the servers' stderr
log (under XDG_STATE_HOME) and the tool schema cache (WASMEXEC_SCHEMA_CACHE) go to
per-session temporary directories, for this process and every subprocess it starts.
The compiled component stays in the shared cache: rebuilding it per session would
cost minutes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from wasmexec import Limits, Pooling, Runtime, Sandbox
from wasmexec._cli.options import SCHEMA_CACHE_ENV

if TYPE_CHECKING:
    from wasmexec._science.image import ScienceRuntime


@pytest.fixture(scope="session", autouse=True)
def _private_user_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Points the audit log, the server log and the schema cache at this session's temporary directory."""
    home = tmp_path_factory.mktemp("user")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(home / "state"))
        patch.setenv(SCHEMA_CACHE_ENV, str(home / "cache" / "tool-schemas.json"))
        yield home


#: Set to a slot count, the session's runtimes run on wasmtime's pooling allocator (CI runs the security suite so).
POOLING_ENV = "WASMEXEC_TEST_POOLING"


def _pooling() -> Pooling | None:
    slots = os.environ.get(POOLING_ENV)
    return Pooling(int(slots)) if slots else None


@pytest.fixture(scope="session")
def runtime() -> Runtime:
    """The real guest, built and compiled once (cached across sessions in the user cache dir)."""
    cache_dir = os.environ.get("WASMEXEC_CACHE_DIR")
    runtime = Runtime(Path(cache_dir) if cache_dir else None, pooling=_pooling())
    runtime.build()
    return runtime


@pytest.fixture(scope="session")
def science_runtime() -> ScienceRuntime:
    """The science image (numpy, pandas), built once like the component; both limit modes.

    Needs the science extra: tests/science and the security suite's science cases are skipped without it.
    """
    from wasmexec._science.image import ScienceRuntime

    cache_dir = os.environ.get("WASMEXEC_CACHE_DIR")
    science = ScienceRuntime(Path(cache_dir) if cache_dir else None, progress=print, pooling=_pooling())
    science.build()  # both limit modes; a no-op once built (as `wasmexec build --profile science`)
    return science


@pytest.fixture
def sandbox(runtime: Runtime) -> Sandbox:
    """A sandbox with default limits except a shorter timeout, so a failing test fails fast."""
    return Sandbox(Limits(timeout_ms=10_000), runtime=runtime)
