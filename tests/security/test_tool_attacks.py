"""Attacks through the tool path: a run that floods a server, a server that floods the host.

A hostile run must not hurt the next one (the breaker counts only the server's own failures),
and a hostile or broken server must not make the host parse, or hold, more than a host call may
carry (`MAX_PAYLOAD_BYTES`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import data_of, free_port, limit_of, listening, log_text
from tests.integration.conftest import SERVERS
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._runctx.toolhost import MAX_PAYLOAD_BYTES
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config

#: The issue's reply: 12.5 MB of small JSON objects cost the host 906 MB (measured) to parse whole.
HUGE_REPLY = 12_500_000
#: What refusing it may cost instead: far below parsing it, above the noise of one process's RSS.
MAX_GROWTH_MB = 100


def test_a_flood_of_slow_calls_under_a_short_deadline_does_not_open_the_breaker_for_the_next_run(
    runtime: Runtime, tmp_path: Path
) -> None:
    config = parse_config({"mcpServers": {"slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]}}})
    code = """
import asyncio, json
import servers.slow as slow
calls = [asyncio.ensure_future(slow.sleep_for(seconds=30)) for _ in range(80)]
await asyncio.sleep(0.5)
refused = [c.exception() for c in calls if c.done() and c.exception() is not None]
print(json.dumps([{"type": type(e).__name__, "message": str(e), "hint": e.hint, "retryable": e.detail.get("retryable")}
                  for e in refused]))
await asyncio.gather(*calls, return_exceptions=True)  # waits out the deadline, like the issue's gather
"""
    with (tmp_path / "servers.log").open("a") as errlog, Broker(config, errlog=errlog, warn=lambda m: None) as broker:
        sandbox = Sandbox(Limits(timeout_ms=60_000), runtime=runtime, tools=broker)
        warm = sandbox.run_sync("import servers.slow as slow\nawait slow.sleep_for(seconds=0)")
        assert data_of(warm) == {"result": 0}  # started and listed: the flood run's 2 s go to the calls
        flood = sandbox.run_sync(code, Limits(timeout_ms=2000))
        assert limit_of(flood) == "timeout"
        refused = json.loads(log_text(flood, "log"))
        busy = [error for error in refused if error["type"] == "ToolCallError"]  # the server's queue was full
        assert refused and all(error["type"] in ("ToolCallError", "SandboxLimitError") for error in refused), refused
        assert all(error["retryable"] is True and "retry" in error["hint"].lower() for error in busy), busy
        assert len(flood["tool_trace"]) == 80 and not any(entry["ok"] for entry in flood["tool_trace"])
        # The next run finds the server usable at once: the flood counted nothing against it.
        after = sandbox.run_sync("import servers.slow as slow\nawait slow.sleep_for(seconds=0)")
        assert data_of(after) == {"result": 0}


# Runs in a child process so that its peak RSS measures the host's cost of one reply and nothing else.
_MEASURE = """
import json, resource, sys
from wasmexec._limits import Limits
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import HostCallError
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config

server = json.loads(sys.argv[1])
config = parse_config({"mcpServers": {"big": server}})

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

with Broker(config, errlog=open("/dev/null", "w"), warn=lambda m: None) as broker:
    def call(tool, arguments):
        run = RunState(limits=Limits(timeout_ms=60_000), tools=broker, run_id="measure")
        handle = run.next_handle()
        run.reserve(handle, len(json.dumps(arguments)))
        broker.start_call(run, handle, "big", tool, arguments)
        [(_, outcome)] = run.wait([handle], 60)
        run.finish()
        if isinstance(outcome, HostCallError):
            return {"kind": outcome.kind, "message": outcome.message, "detail": outcome.detail}
        return {"bytes": len(outcome)}

    call("small", {})
    call("big_reply", {"size": 1_000_000, "shape": "items"})  # every code path warmed up with a 1 MB reply
    before = peak_mb()
    huge = call("big_reply", {"size": int(sys.argv[2]), "shape": "items"})
    growth = peak_mb() - before
    print(json.dumps({"huge": huge, "growth_mb": growth, "after": call("small", {})}))
"""


def _measure(server: dict[str, object], size: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(server), str(size)], capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.fixture(params=["stdio", "http-sse", "http-json"])
def big_server(request: pytest.FixtureRequest) -> Iterator[dict[str, object]]:
    script = str(SERVERS / "big.py")
    if request.param == "stdio":
        yield {"command": sys.executable, "args": [script]}
        return
    port = free_port()
    extra = ["--json-response"] if request.param == "http-json" else []
    with listening([sys.executable, script, "--http", str(port), *extra], port) as url:
        yield {"url": url}


def test_a_reply_over_the_payload_cap_is_refused_without_being_parsed_whole(big_server: dict[str, object]) -> None:
    measured = _measure(big_server, HUGE_REPLY)
    huge = measured["huge"]
    assert isinstance(huge, dict) and huge["kind"] == "limit-exceeded", huge
    assert str(MAX_PAYLOAD_BYTES) in str(huge["message"]) and huge["detail"]["limit"] == "payload_bytes"
    assert measured["growth_mb"] < MAX_GROWTH_MB, measured
    assert measured["after"] == {"bytes": len('"ok"')}  # the connection still serves the next call


def test_a_reply_under_the_cap_arrives_whole_on_every_transport(big_server: dict[str, object]) -> None:
    # Over HTTP the SDK's own default cut server-sent events at 1 MiB.
    measured = _measure(big_server, 2_000_000)
    huge = measured["huge"]
    assert isinstance(huge, dict) and "bytes" in huge and int(huge["bytes"]) > 1_900_000, huge
