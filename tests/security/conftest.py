"""Every break-out test ends by checking that the host still runs code normally."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security._support import assert_host_survives
from wasmexec import Runtime


@pytest.fixture(autouse=True)
def _the_host_survives(runtime: Runtime) -> Iterator[None]:
    yield
    assert_host_survives(runtime)
