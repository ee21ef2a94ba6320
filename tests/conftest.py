"""Shared fixtures: one real runtime (real component, real wasmtime) for the whole session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wasmexec import Limits, Runtime, Sandbox


@pytest.fixture(scope="session")
def runtime() -> Runtime:
    """The real guest, built and compiled once (cached across sessions in the user cache dir)."""
    cache_dir = os.environ.get("WASMEXEC_CACHE_DIR")
    runtime = Runtime(Path(cache_dir) if cache_dir else None)
    runtime.build()
    return runtime


@pytest.fixture
def sandbox(runtime: Runtime) -> Sandbox:
    """A sandbox with default limits except a shorter timeout, so a failing test fails fast."""
    return Sandbox(Limits(timeout_ms=10_000), runtime=runtime)
