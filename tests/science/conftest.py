"""The science profile's fixtures (its runtime: `science_runtime`, tests/conftest.py), or every test skipped.

The science extra (``pip install "wasmexec[science]"``) pins wasmtime 49, so these tests run in a
venv of their own (`.ci/run` makes one); in the main venv they are skipped, saying so. The image
is built with ``wasmexec build --profile science`` (CI runs it before these tests); the fixture
builds only what is missing, for a developer who has not.
"""

from __future__ import annotations

import os

import pytest

from wasmexec import Limits, Sandbox
from wasmexec._science import upstream
from wasmexec._science.image import ScienceRuntime


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # `-m science` selects them, `-m "not science"` leaves them out
        if "tests/science/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.science)
    if upstream.installed():
        return
    skip = pytest.mark.skip(reason='the science extra is not installed: pip install "wasmexec[science]" (CI '
                            "runs these tests in a venv of their own, see .ci/run)")  # fmt: skip
    for item in items:
        if "tests/science/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture
def science(science_runtime: ScienceRuntime) -> Sandbox:
    """A science sandbox with default limits except a shorter timeout."""
    return Sandbox(Limits(timeout_ms=20_000), runtime=science_runtime, profile="science")
