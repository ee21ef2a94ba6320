"""Result nesting depth: what the host lets through, a real MCP client parses, and nothing hangs.

The `mcp` Python client parses each message with pydantic-core, which refuses JSON nested
deeper than 200 levels; the run result's data sits 4 levels down in a ``tools/call`` answer,
so data 197 levels deep made the client drop the answer and wait forever. The host refuses
data deeper than `MAX_RESULT_DEPTH` (far below every mainstream parser's limit) instead.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import data_of, diagnostic, limit_of
from wasmexec import Runtime, validate_run_result
from wasmexec._envelope import MAX_RESULT_DEPTH

#: Generous: one call takes well under a second; a client that drops the answer would wait forever.
CALL_TIMEOUT_S = 60


def _nested(depth: int, nest: str) -> str:
    """Guest code whose result is `1` inside `depth` containers (`nest` wraps `x`)."""
    return f"x = 1\nfor _ in range({depth}):\n    x = {nest}\nresult = x"


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, (list, dict)):
        value = value[0] if isinstance(value, list) else value["k"]
        depth += 1
    return depth


def _call_all(runtime: Runtime, codes: list[str]) -> list[dict[str, Any]]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--no-audit"],
        env={"WASMEXEC_CACHE_DIR": str(runtime.artifacts.directory), "PATH": os.environ["PATH"]},
    )

    async def main() -> list[dict[str, Any]]:
        results = []
        async with Client(params) as client:
            for code in codes:
                with anyio.fail_after(CALL_TIMEOUT_S):
                    answer = await client.call_tool("run_python", {"code": code})
                assert not answer.is_error, answer
                validate_run_result(answer.structured_content)
                results.append(answer.structured_content)
        return results

    return anyio.run(main)


@pytest.mark.parametrize("nest", ["[x]", "{'k': x}"], ids=["lists", "objects"])
def test_a_result_at_the_depth_limit_reaches_a_real_client_and_one_level_more_is_refused(
    runtime: Runtime, nest: str
) -> None:
    at_limit, over_limit = _call_all(runtime, [_nested(MAX_RESULT_DEPTH, nest), _nested(MAX_RESULT_DEPTH + 1, nest)])
    assert _depth(data_of(at_limit)) == MAX_RESULT_DEPTH
    assert limit_of(over_limit) == "result_depth"
    found = diagnostic(over_limit, "SANDBOX_LIMIT")
    assert str(MAX_RESULT_DEPTH) in found["message"] and found["hint"]
    assert "data" not in over_limit["result"]


def test_results_that_used_to_hang_the_client_are_refused_promptly(runtime: Runtime) -> None:
    results = _call_all(runtime, [_nested(depth, "[x]") for depth in (197, 200, 1_000)])
    assert [limit_of(result) for result in results] == ["result_depth"] * 3
