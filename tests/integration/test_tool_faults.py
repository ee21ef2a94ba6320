"""Faults around the MCP servers: crashes, failed starts, garbage, stale caches, list_changed, shutdown."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import data_of, diagnostic, error_of, free_port, listening
from tests.integration.conftest import NODE_BIN, SERVERS
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._audit import AuditLog
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config
from wasmexec._tools.policy import Policy
from wasmexec._tools.schema_cache import SchemaCache


@contextmanager
def _broker(servers: dict[str, object], tmp: Path, **options: object) -> Iterator[Broker]:
    with (tmp / "servers.log").open("a") as errlog, Broker(
        parse_config({"mcpServers": servers}), cache_path=tmp / "schemas.json", errlog=errlog,
        warn=lambda message: None, **options,  # type: ignore[arg-type]
    ) as broker:  # fmt: skip
        yield broker


def _sandbox(runtime: Runtime, broker: Broker, timeout_ms: int = 20_000) -> Sandbox:
    return Sandbox(Limits(timeout_ms=timeout_ms), runtime=runtime, tools=broker, redactor=broker.redactor)


def _script(name: str) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(SERVERS / name)]}


# A server whose start fails when BROKEN=1: env values are not part of the cache fingerprint.
def _switchable(name: str, broken: bool) -> dict[str, object]:
    code = (
        "import os, runpy, sys\nif os.environ['BROKEN'] == '1':\n    sys.exit(3)\n"
        f"sys.path.insert(0, {str(SERVERS)!r})\n"
        f"runpy.run_path({str(SERVERS / name)!r}, run_name='__main__')"
    )
    return {"command": sys.executable, "args": ["-c", code], "env": {"BROKEN": "1" if broken else "0"}}


def _children() -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(entry.name))
    return found


def test_a_server_that_fails_to_start_hides_none_of_the_others(runtime: Runtime, tmp_path: Path) -> None:
    servers = {"good": _script("slow.py"), "broken": {"command": "/no/such/server"}}
    with _broker(servers, tmp_path) as broker:
        sandbox = _sandbox(runtime, broker)
        code = """
from codemode import discovery
import servers.good as good
found = discovery.search_tools("sleep")
result = {"servers": [s["server_id"] for s in discovery.list_servers()],
          "found": [r["tool_name"] for r in found["results"]],
          "called": await good.sleep_for(seconds=0)}
"""
        result = sandbox.run_sync(code)
        data = data_of(result)
        assert data["servers"] == ["good", "broken"] and data["found"] == ["sleep_for"]
        assert "broken" in diagnostic(result, "TOOLS_UNAVAILABLE")["message"]
        failed = sandbox.run_sync("import servers.broken as b\nawait b.anything()")
        assert error_of(failed)["type"] == "ToolCallError" and "broken" in error_of(failed)["message"]


def test_the_breaker_opens_after_repeated_failures_and_fails_fast(runtime: Runtime, tmp_path: Path) -> None:
    with _broker({"broken": {"command": "/no/such/server"}}, tmp_path) as broker:
        sandbox = _sandbox(runtime, broker)
        messages = [error_of(sandbox.run_sync("from codemode import discovery\ndiscovery.list_tools('broken')"))
                    ["message"] for _ in range(4)]  # fmt: skip
    assert "failed to start" in messages[0]
    assert "paused" in messages[3]  # the breaker is open: no new start was attempted


def test_garbage_on_a_servers_stdout_does_not_break_its_calls(runtime: Runtime, tmp_path: Path) -> None:
    with _broker({"garbage": _script("garbage.py")}, tmp_path) as broker:
        sandbox = _sandbox(runtime, broker)
        code = """
import servers.garbage as g
for kind in ("text", "json", "partial", "response", "notification", "binary"):
    await g.wire_garbage(kind=kind, lines=2)
result = await g.ok()
"""
        assert data_of(sandbox.run_sync(code)) in ("ok", {"result": "ok"})


def test_discovery_is_answered_from_the_cache_without_starting_the_server(runtime: Runtime, tmp_path: Path) -> None:
    servers = {"slow": _script("slow.py")}
    with _broker(servers, tmp_path) as first:
        data_of(_sandbox(runtime, first).run_sync("from codemode import discovery\ndiscovery.list_tools('slow')"))
    with _broker(servers, tmp_path) as second:
        sandbox = _sandbox(runtime, second)
        code = "from codemode import discovery\n[t['tool_name'] for t in discovery.list_tools('slow')]"
        assert data_of(sandbox.run_sync(code)) == ["sleep_for"]
        assert second.pool._connections == {}  # nothing started
        assert data_of(sandbox.run_sync("import servers.slow as s\nawait s.sleep_for(seconds=0)")) == {"result": 0}
        assert "slow" in second.pool._connections  # the first call started it


def test_a_stale_tool_list_serves_with_a_warning_when_the_server_is_down(runtime: Runtime, tmp_path: Path) -> None:
    now = [1_000_000.0]
    cache = SchemaCache(tmp_path / "schemas.json", ttl_s=60, clock=lambda: now[0], warn=lambda m: None)
    with _broker({"flaky": _switchable("slow.py", broken=False)}, tmp_path, cache=cache) as broker:
        data_of(_sandbox(runtime, broker).run_sync("from codemode import discovery\ndiscovery.list_tools('flaky')"))
    now[0] += 3600  # the entry is now stale
    with _broker({"flaky": _switchable("slow.py", broken=True)}, tmp_path, cache=cache) as broker:
        result = _sandbox(runtime, broker).run_sync(
            "from codemode import discovery\n[t['tool_name'] for t in discovery.list_tools('flaky')]"
        )
        assert data_of(result) == ["sleep_for"]
        assert "cached tool list" in diagnostic(result, "TOOLS_UNAVAILABLE")["message"]


def test_a_tool_list_change_shows_from_the_next_run_not_the_current_one(runtime: Runtime, tmp_path: Path) -> None:
    with _broker({"changing": _script("changing.py")}, tmp_path) as broker:
        sandbox = _sandbox(runtime, broker)
        code = """
from codemode import discovery
import servers.changing as ch
before = [t["tool_name"] for t in discovery.list_tools("changing")]
await ch.add_tool(name="fresh_tool")
after = [t["tool_name"] for t in discovery.list_tools("changing")]
result = [before == after, "fresh_tool" in after]
"""
        assert data_of(sandbox.run_sync(code)) == [True, False]  # frozen for the run
        key = broker._key("changing")
        deadline = time.monotonic() + 10
        while broker.cache.get(key) is not None and time.monotonic() < deadline:
            time.sleep(0.02)  # the notification arrives on the broker's loop
        names = data_of(
            sandbox.run_sync(
                "from codemode import discovery\n[t['tool_name'] for t in discovery.list_tools('changing')]"
            )
        )
        assert "fresh_tool" in names


def test_closing_the_broker_leaves_no_server_process_behind(runtime: Runtime, tmp_path: Path) -> None:
    before = _children()
    servers = {"slow": _script("slow.py"), "hang": _script("hang.py"), "crashy": _script("crashy.py")}
    with _broker(servers, tmp_path) as broker:
        sandbox = _sandbox(runtime, broker, timeout_ms=60_000)  # three servers start on a busy machine
        data_of(sandbox.run_sync("import asyncio, servers.slow as s, servers.crashy as c, servers.hang as h\n"
                                 "hung = asyncio.ensure_future(h.hang())\n"
                                 "await asyncio.gather(s.sleep_for(seconds=0), c.ok())\n"
                                 "await asyncio.sleep(0.2)"))  # fmt: skip
        assert len(_children() - before) >= 3
    deadline = time.monotonic() + 10
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children() - before == set()


def _audited_calls(tmp: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in (tmp / "audit.jsonl").read_text().splitlines()]
    return [line for line in lines if line["kind"] == "tool_call"]


def test_a_call_still_running_when_the_run_ends_is_cancelled(runtime: Runtime, tmp_path: Path) -> None:
    with _broker({"hang": _script("hang.py")}, tmp_path, audit=AuditLog(tmp_path / "audit.jsonl")) as broker:
        sandbox = _sandbox(runtime, broker)
        code = "import asyncio, servers.hang as h\ntask = asyncio.ensure_future(h.hang())\nawait asyncio.sleep(0.2)"
        result = sandbox.run_sync(code)
        data_of(result)
        (entry,) = result["tool_trace"]
        assert entry["ok"] is False and entry["error"].startswith("cancelled")
        # The abandoned call was cancelled: it holds no call slot and the server still answers.
        assert data_of(sandbox.run_sync("import servers.hang as h\nawait h.ok()")) in ("ok", {"result": "ok"})
    assert [line["outcome"] for line in _audited_calls(tmp_path)] == ["cancelled", "ok"]


def test_a_call_cut_off_by_the_deadline_is_recorded_as_cancelled_and_spares_the_breaker(
    runtime: Runtime, tmp_path: Path
) -> None:
    with _broker({"hang": _script("hang.py")}, tmp_path, audit=AuditLog(tmp_path / "audit.jsonl")) as broker:
        sandbox = _sandbox(runtime, broker)
        assert data_of(sandbox.run_sync("import servers.hang as h\nawait h.ok()")) in ("ok", {"result": "ok"})
        result = sandbox.run_sync("import servers.hang as h\nawait h.hang()", Limits(timeout_ms=1500))
        assert error_of(result)["type"] == "SandboxLimitError"
        (entry,) = result["tool_trace"]
        assert entry["ok"] is False and entry["error"].startswith("cancelled")
        for _ in range(3):  # three cut-off calls would open the breaker if they counted as the server's failures
            sandbox.run_sync("import servers.hang as h\nawait h.hang()", Limits(timeout_ms=300))
        assert data_of(sandbox.run_sync("import servers.hang as h\nawait h.ok()")) in ("ok", {"result": "ok"})
    assert [line["outcome"] for line in _audited_calls(tmp_path)] == ["ok"] + ["cancelled"] * 4 + ["ok"]


def test_every_refused_call_attempt_is_traced_and_audited(runtime: Runtime, tmp_path: Path) -> None:
    servers = {"slow": _script("slow.py"), "hang": _script("hang.py")}
    with _broker(servers, tmp_path, audit=AuditLog(tmp_path / "audit.jsonl"), policy=Policy(deny=("hang.hang",))
                 ) as broker:  # fmt: skip
        code = """
from codemode import _host
from codemode.errors import CodemodeError
kinds = []
for attempt in (lambda: _host.start_call("hang", "ok", []),                        # arguments not an object
                lambda: _host.start_call("hang", "okay", {}),                      # no such tool
                lambda: _host.start_call("slow", "sleep_for", {"seconds": "soon"}),  # schema validation
                lambda: _host.start_call("hang", "hang", {})):                     # denied by policy
    try:
        attempt()
    except CodemodeError as exc:
        kinds.append(type(exc).__name__)
result = kinds
"""
        result = _sandbox(runtime, broker, timeout_ms=60_000).run_sync(code)  # two servers start on a busy machine
        assert data_of(result) == ["CodemodeError", "ToolNotFoundError", "SchemaValidationError",
                                   "ApprovalDeniedError"]  # fmt: skip
        assert result["result"]["metrics"]["tool_calls"] == 4
        trace = result["tool_trace"]
        assert [entry["ok"] for entry in trace] == [False, False, False, False]
        assert [entry["error"].split(":")[0] for entry in trace] == [
            "invalid-argument", "not-found", "invalid-argument", "denied"]  # fmt: skip
    outcomes = sorted(str(line["outcome"]) for line in _audited_calls(tmp_path))
    assert outcomes == ["denied", "invalid-argument", "invalid-argument", "not-found"]


@pytest.fixture
def http_server() -> Iterator[str]:
    port = free_port()
    with listening([sys.executable, str(SERVERS / "slow.py"), "--http", str(port)], port) as url:
        yield url


def test_a_streamable_http_server_is_called_like_a_stdio_one(
    runtime: Runtime, tmp_path: Path, http_server: str
) -> None:
    with _broker({"remote": {"url": http_server, "headers": {"Authorization": "Bearer abcdefghijklmnop1234"}}},
                 tmp_path) as broker:  # fmt: skip
        code = "import servers.remote as r\nawait r.sleep_for(seconds=0.1)"
        assert data_of(_sandbox(runtime, broker).run_sync(code)) == {"result": 0.1}


def test_a_2025_era_list_changed_notification_reaches_the_broker(runtime: Runtime, tmp_path: Path) -> None:
    # server-everything (TS SDK, 2025-11-25) announces tools/list_changed right after it connects.
    servers = {"everything": {"command": str(NODE_BIN / "mcp-server-everything"), "args": ["stdio"]}}
    with _broker(servers, tmp_path) as broker:
        result = _sandbox(runtime, broker).run_sync("import servers.everything as e\nawait e.echo(message='x')")
        assert data_of(result) == "Echo: x"
        assert broker.pool._connections["everything"]._attempt.client.protocol_version == "2025-11-25"
        deadline = time.monotonic() + 10
        while broker._generation.get("everything", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        # Heard: a listing taken before it is never cached (one taken after it is; see test_broker).
        assert broker._generation.get("everything", 0) >= 1
