"""The operator's limits are ceilings: a client of `wasmexec serve` can lower them, never raise them.

A real `mcp` client (both protocol eras) drives `wasmexec serve --profile P --max-tool-calls 3
--memory-mb 64 --timeout-ms 8000` over stdio, as an agent would (128 MiB for the science image, which
alone takes 64.2 MiB).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters

from tests.helpers import data_of, limit_of
from tests.integration.conftest import SERVERS, child_env
from tests.security._support import profile_of
from wasmexec import Limits, Runtime
from wasmexec._server.description import input_schema

MODES = ["legacy", "auto"]
#: Per profile (`wasmexec serve --profile`): the science image alone takes about 85 MiB, so its memory ceiling
#: is higher; the default image's values are the ones this module always had.
PROFILE_CEILINGS = {
    "default": {"timeout_ms": 8000, "memory_mb": 64, "max_tool_calls": 3},
    "science": {"timeout_ms": 8000, "memory_mb": 128, "max_tool_calls": 3},
}
#: A memory limit a client may lower to: `ALLOCATE_20_MIB` fits under the ceiling beside the interpreter
#: (about 30 MiB for the default image, 85 MiB for the science one), not under this, which is still above the
#: image's own floor (so the run starts and the allocation is what fails).
LOWERED_MEMORY_MB = {"default": 32, "science": 96}
ALLOCATE_20_MIB = "b = bytearray(20 * 1024 * 1024)\nresult = len(b)"
CALLS = "import servers.slow as s\nfor _ in range({n}):\n    await s.sleep_for(seconds=0)\nresult = 'done'"
#: Runs tried while the tool server starts: on a loaded machine its start-up alone can outlast the 2 s ceiling.
WARM_UP_RUNS = 15


@pytest.fixture(scope="module")
def ceilings(runtime: Runtime) -> dict[str, int]:
    return PROFILE_CEILINGS[profile_of(runtime)]


@pytest.fixture(scope="module")
def params(
    tmp_path_factory: pytest.TempPathFactory, runtime: Runtime, ceilings: dict[str, int]
) -> StdioServerParameters:
    config = tmp_path_factory.mktemp("ceilings") / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]}}})
    )
    options = [f"--{name.replace('_', '-')}={value}" for name, value in ceilings.items()]
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "wasmexec",
            "serve",
            "--profile",
            profile_of(runtime),
            "--config",
            str(config),
            "--no-audit",
            *options,
        ],
        env=child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory)),
    )


def _session(params: StdioServerParameters, mode: str, body: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
                return await body(client)

    return anyio.run(main)


async def _run(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    reply = await client.call_tool("run_python", {"code": code, **arguments})
    assert not reply.is_error, reply
    return dict(reply.structured_content)  # type: ignore[arg-type]


async def _warm_up(client: Client) -> None:
    """Starts the tool server (a run that times out while it starts leaves it starting for the next)."""
    for _ in range(WARM_UP_RUNS):
        if (await _run(client, CALLS.format(n=1)))["result"]["ok"]:
            return
    pytest.fail(f"the slow server did not answer within {WARM_UP_RUNS} runs")


@pytest.mark.parametrize("mode", MODES)
def test_the_listed_input_schema_states_the_operators_maxima(
    params: StdioServerParameters, ceilings: dict[str, int], mode: str
) -> None:
    async def body(client: Client) -> Any:
        return (await client.list_tools()).tools[0].input_schema

    properties = _session(params, mode, body)["properties"]
    for name, ceiling in ceilings.items():
        assert properties[name]["maximum"] == ceiling, properties[name]
        assert properties[name]["default"] == ceiling, properties[name]


@pytest.mark.parametrize("mode", MODES)
def test_a_client_cannot_raise_a_limit_above_the_operators(
    params: StdioServerParameters, ceilings: dict[str, int], mode: str
) -> None:
    attempts = [{"max_tool_calls": 10_000}, {"memory_mb": 4095}, {"timeout_ms": 60_000}]
    attempts += [{name: ceiling + 1} for name, ceiling in ceilings.items()]  # just over each ceiling

    async def body(client: Client) -> list[tuple[str, int, str]]:
        refused = []
        for attempt in attempts:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("run_python", {"code": "result = 1", **attempt})
            (name,) = attempt
            refused.append((name, caught.value.code, str(caught.value)))
        return refused

    for name, code, message in _session(params, mode, body):
        assert code == -32602
        assert f"'{name}'" in message and f"at most {ceilings[name]}" in message, message


@pytest.mark.parametrize("mode", MODES)
def test_a_client_can_lower_limits_and_the_lower_limits_apply(
    params: StdioServerParameters, runtime: Runtime, ceilings: dict[str, int], mode: str
) -> None:
    lowered = LOWERED_MEMORY_MB[profile_of(runtime)]

    async def body(client: Client) -> dict[str, Any]:
        return {
            "calls": await _run(client, CALLS.format(n=1), max_tool_calls=0),
            "memory": await _run(client, ALLOCATE_20_MIB, memory_mb=lowered),
            "memory at the ceiling": await _run(client, ALLOCATE_20_MIB),
            "timeout": await _run(client, "while True: pass", timeout_ms=200),
        }

    results = _session(params, mode, body)
    assert limit_of(results["calls"]) == "tool_calls"
    assert limit_of(results["memory"]) == "memory"
    assert data_of(results["memory at the ceiling"]) == 20 * 1024 * 1024
    assert limit_of(results["timeout"]) == "timeout"
    assert results["timeout"]["duration_ms"] < ceilings["timeout_ms"]


def test_without_arguments_the_operators_limits_apply(params: StdioServerParameters) -> None:
    async def body(client: Client) -> dict[str, Any]:
        await _warm_up(client)
        return {"within": await _run(client, CALLS.format(n=3)), "over": await _run(client, CALLS.format(n=4)),
                "slow": await _run(client, "while True: pass")}  # fmt: skip

    results = _session(params, "auto", body)
    assert data_of(results["within"]) == "done"
    assert limit_of(results["over"]) == "tool_calls"
    assert limit_of(results["slow"]) == "timeout"


def test_the_schema_refuses_what_it_does_not_describe(params: StdioServerParameters) -> None:
    """Wrong types, booleans for integers, unknown keys and values under the minimum: -32602, naming the field."""
    bad = [({"code": "1", "max_tool_calls": True}, "max_tool_calls"), ({"code": "1", "memory_mb": 2.5}, "memory_mb"),
           ({"code": "1", "timeout_ms": 0}, "timeout_ms"), ({"code": "1", "servers": "slow"}, "servers"),
           ({"code": "1", "limits": {}}, "limits"), ({}, "code")]  # fmt: skip

    async def body(client: Client) -> list[tuple[int, str]]:
        refused = []
        for arguments, _ in bad:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("run_python", arguments)
            refused.append((caught.value.code, str(caught.value)))
        return refused

    for (code, message), (_, field) in zip(_session(params, "auto", body), bad, strict=True):
        assert code == -32602 and field in message and message.startswith("run_python:"), message


def test_the_schema_stays_satisfiable_when_a_ceiling_is_below_the_usual_minimum() -> None:
    """A tiny operator ceiling lowers the minimum too, so the operator's own value is always accepted."""
    schema = input_schema(Limits(memory_mb=8, max_tool_calls=0, timeout_ms=1))
    for name in ("memory_mb", "max_tool_calls", "timeout_ms"):
        assert schema["properties"][name]["minimum"] <= schema["properties"][name]["maximum"]
