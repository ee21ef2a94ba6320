"""Tool calls from a science run: discovery, an awaited call, concurrency, through the door to a real MCP server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmexec import Limits, Sandbox
from wasmexec._science.image import ScienceRuntime
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config

SERVERS = Path(__file__).resolve().parent.parent / "servers"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("broker")
    config = {"mcpServers": {"slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]}}}
    with (
        (tmp / "servers.log").open("w") as errlog,
        Broker(
            parse_config(config), cache_path=tmp / "schemas.json", errlog=errlog, warn=lambda message: None
        ) as broker,
    ):
        yield broker


@pytest.fixture
def tool_science(science_runtime: ScienceRuntime, broker: Broker) -> Sandbox:
    return Sandbox(Limits(timeout_ms=30_000), runtime=science_runtime, tools=broker, redactor=broker.redactor,
                   profile="science")  # fmt: skip


def test_a_science_run_discovers_and_calls_a_tool_with_numpy_on_the_result(tool_science: Sandbox) -> None:
    code = """
import asyncio
import numpy as np
from codemode import discovery
import servers.slow as slow
names = [server["server_id"] for server in discovery.list_servers()]
values = await asyncio.gather(*(slow.sleep_for(seconds=0.2) for _ in range(3)))
result = {"servers": names, "total": float(np.sum([value["result"] for value in values]))}
"""
    result = tool_science.run_sync(code)
    assert result["result"]["ok"], (result["result"], result["diagnostics"], result["logs"])
    assert result["result"]["data"] == {"servers": ["slow"], "total": pytest.approx(0.6)}
    assert [(entry["tool_name"], entry["ok"]) for entry in result["tool_trace"]] == [("sleep_for", True)] * 3
    assert result["result"]["metrics"]["tool_calls"] == 3


def test_a_tool_error_arrives_as_a_codemode_exception(tool_science: Sandbox) -> None:
    code = """
import servers.slow as slow
from codemode import errors
try:
    await slow.sleep_for(seconds="not a number")
except errors.CodemodeError as exc:
    result = type(exc).__name__
"""
    result = tool_science.run_sync(code)
    assert result["result"]["data"] == "SchemaValidationError", result


def test_the_deadline_stops_a_run_waiting_on_a_tool(tool_science: Sandbox) -> None:
    code = "import servers.slow as slow\nawait slow.sleep_for(seconds=20)"
    result = tool_science.run_sync(code, Limits(timeout_ms=1_500))
    assert not result["result"]["ok"]
    assert result["diagnostics"][-1].get("limit") == "timeout", result


def test_llm_ask_reaches_the_sampler_through_the_door(science: Sandbox) -> None:
    asked: list[dict[str, object]] = []

    def sampler(request: dict[str, object]) -> str:
        asked.append(request)
        return f"echo: {request['prompt']}"

    code = """
import asyncio
import numpy as np
from codemode import llm
answers = await asyncio.gather(llm.ask("one", max_tokens=8), llm.ask("two", system="be brief"))
result = answers + [int(np.arange(4).sum())]
"""
    result = science.run_sync(code, sampler=sampler)
    assert result["result"]["ok"], result
    assert result["result"]["data"] == ["echo: one", "echo: two", 6]
    assert sorted(str(request["prompt"]) for request in asked) == ["one", "two"]
    assert [entry["tool_name"] for entry in result["tool_trace"]] == ["llm.ask", "llm.ask"]


def test_every_bridge_module_is_in_the_snapshot(science: Sandbox) -> None:
    # A run sees only what the snapshot holds: a module agent code imports first must be there.
    bridge = Path(__file__).resolve().parents[2] / "bridge" / "codemode"
    names = sorted(path.stem for path in bridge.glob("*.py") if path.stem != "__init__")
    code = f"import importlib, sys\nresult = [n for n in {names!r} if importlib.import_module('codemode.' + n) is None]"
    result = science.run_sync(code)
    assert result["result"]["ok"], result
    assert result["result"]["data"] == []
