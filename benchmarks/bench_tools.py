"""Tool-call benchmarks: round trips through the host, discovery and search, time to first result.

    python benchmarks/bench_tools.py [--quick] [--json OUT]

Measured in one run on this machine, medians and p95:
- guest -> host -> in-process MCP server -> back, per call (timed inside the guest);
- guest -> host -> stdio MCP server (tests/servers/slow.py) -> back, per call;
- search over 1,000 synthetic tools on the host (Catalog.search) and as seen from the guest;
- discovery (list_tools) from a warm schema cache, and cold (the server starts);
- time to first result of a run that uses one of 10 configured servers, warm cache (only that one starts).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wasmexec import Limits, Runtime, Sandbox  # noqa: E402
from wasmexec._tools.broker import Broker  # noqa: E402
from wasmexec._tools.catalog import Catalog  # noqa: E402
from wasmexec._tools.config import ServerConfig, parse_config  # noqa: E402
from wasmexec._tools.pool import Listing  # noqa: E402

SERVERS = ROOT / "tests" / "servers"
WORDS = (
    "get list create update delete user issue repo file search send email message channel team project task "
    "comment label branch commit pull request review deploy build test run job queue event calendar invoice "
    "payment customer order product"
).split()


def quantiles(samples: list[float]) -> dict[str, float]:
    """Median and p95 in milliseconds."""
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 3), "n": len(ordered)}  # fmt: skip


def guest_timed_calls(sandbox: Sandbox, module: str, call: str, count: int) -> list[float]:
    """Times `count` sequential tool calls inside the guest; returns seconds per call."""
    code = f"""
import time, servers.{module} as m
samples = []
for _ in range({count}):
    t = time.perf_counter()
    await m.{call}
    samples.append(time.perf_counter() - t)
result = samples
"""
    result = sandbox.run_sync(code)
    assert result["result"]["ok"], result
    return list(result["result"]["data"])


class InProcessBroker(Broker):
    """A broker whose one server is an MCPServer in this process (no subprocess, no pipes)."""

    def __init__(self, server: Any, **options: Any) -> None:
        super().__init__(parse_config({"mcpServers": {"inproc": {"command": "unused"}}}), **options)
        self.pool.open_client = lambda config, on_message: _client(server, on_message)  # type: ignore[method-assign]


def _client(server: Any, on_message: Any) -> Any:
    from mcp import Client

    return Client(server, message_handler=on_message)


def in_process_server() -> Any:
    from mcp.server import MCPServer

    server = MCPServer("inproc")

    @server.tool()
    def ping() -> str:
        """Answers at once."""
        return "pong"

    return server


def bench_round_trips(runtime: Runtime, count: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with InProcessBroker(in_process_server()) as broker:
        sandbox = Sandbox(
            Limits(timeout_ms=120_000, max_tool_calls=10_000), runtime=runtime, tools=broker, redactor=broker.redactor
        )
        guest_timed_calls(sandbox, "inproc", "ping()", 20)  # connect, warm up
        results["guest_to_in_process_server"] = quantiles(guest_timed_calls(sandbox, "inproc", "ping()", count))
    with tempfile.TemporaryDirectory() as tmp, Broker(
        parse_config({"mcpServers": {"slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]}}}),
        cache_path=Path(tmp) / "cache.json", errlog=open(Path(tmp) / "log", "w"),
    ) as broker:  # fmt: skip
        sandbox = Sandbox(
            Limits(timeout_ms=120_000, max_tool_calls=10_000), runtime=runtime, tools=broker, redactor=broker.redactor
        )
        guest_timed_calls(sandbox, "slow", "sleep_for(seconds=0)", 20)
        results["guest_to_stdio_server"] = quantiles(guest_timed_calls(sandbox, "slow", "sleep_for(seconds=0)", count))
    return results


def synthetic_catalog(tools: int, servers: int = 10) -> tuple[Catalog, dict[str, Listing]]:
    rng = random.Random(1)
    configs = {f"s{k}": ServerConfig(f"s{k}", "stdio", command="x") for k in range(servers)}
    listings = {
        sid: Listing(sid, "1", None, None, "2025-11-25", [
            {"name": "_".join(rng.sample(WORDS, 3)) + f"_{n * 1000 + i}",
             "description": " ".join(rng.sample(WORDS, 12)), "inputSchema": {"type": "object"}}
            for i in range(tools // servers)])
        for n, sid in enumerate(configs)
    }  # fmt: skip
    return Catalog(configs, lambda ids: ({i: listings[i] for i in ids}, {})), listings


#: Long enough and enough calls for the sample sizes below.
BENCH_LIMITS = Limits(timeout_ms=120_000, max_tool_calls=10_000)

QUERIES = ["create issue", "send email to customer", "delete_user_repo_5", "invoice payment", "zzzz nothing"]


def bench_search(runtime: Runtime, repeats: int) -> dict[str, Any]:
    catalog, listings = synthetic_catalog(1000)
    catalog.prefetch(list(listings))
    started = time.perf_counter()
    catalog.search("warm", "description", None, 10)
    index_build = time.perf_counter() - started
    host = []
    for _ in range(repeats):
        for query in QUERIES:
            started = time.perf_counter()
            catalog.search(query, "description", None, 10)
            host.append(time.perf_counter() - started)

    class Tools:
        def __init__(self) -> None:
            self.broker = Broker(parse_config({"mcpServers": {}}))

        def catalog(self, run: Any, op: str, request: Any) -> Any:
            run.catalog = catalog
            return Broker.catalog(self.broker, run, op, request)  # type: ignore[arg-type]

        def start_call(self, *args: Any) -> None:
            raise NotImplementedError

    sandbox = Sandbox(BENCH_LIMITS, runtime=runtime, tools=Tools())  # type: ignore[arg-type]
    code = f"""
import time
from codemode import discovery
samples = []
for _ in range({repeats}):
    for q in {QUERIES!r}:
        t = time.perf_counter()
        discovery.search_tools(q, limit=10)
        samples.append(time.perf_counter() - t)
result = samples
"""
    result = sandbox.run_sync(code)
    assert result["result"]["ok"], result
    return {"tools": 1000, "index_build_ms": round(index_build * 1000, 3), "host": quantiles(host),
            "guest": quantiles(result["result"]["data"])}  # fmt: skip


def bench_discovery_and_first_result(runtime: Runtime) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache.json"
        servers = {f"server{k}": {"command": sys.executable, "args": [str(SERVERS / "slow.py")],
                                  "env": {f"SERVER_{k}": "1"}} for k in range(10)}  # fmt: skip
        config = parse_config({"mcpServers": servers})
        log = open(Path(tmp) / "log", "w")
        code = "from codemode import discovery\ndiscovery.list_tools('server0')"
        with Broker(config, cache_path=cache, errlog=log) as broker:
            sandbox = Sandbox(runtime=runtime, tools=broker)
            started = time.perf_counter()
            cold = sandbox.run_sync(code)
            cold_ms = (time.perf_counter() - started) * 1000
            broker.refresh(list(servers))  # warm every entry
        warm = []
        with Broker(config, cache_path=cache, errlog=log) as broker:
            sandbox = Sandbox(runtime=runtime, tools=broker)
            for _ in range(20):
                started = time.perf_counter()
                sandbox.run_sync(code)
                warm.append(time.perf_counter() - started)
            started_servers_after_discovery = len(broker.pool._connections)
        with Broker(config, cache_path=cache, errlog=log) as broker:
            sandbox = Sandbox(runtime=runtime, tools=broker)
            started = time.perf_counter()
            first = sandbox.run_sync("import servers.server3 as s\nawait s.sleep_for(seconds=0)")
            first_ms = (time.perf_counter() - started) * 1000
            started_servers = len(broker.pool._connections)
        log.close()
    assert cold["result"]["ok"] and first["result"]["ok"], (cold, first)
    return {"list_tools_run_cold_ms": round(cold_ms, 1), "list_tools_run_warm": quantiles(warm),
            "servers_started_by_warm_discovery": started_servers_after_discovery,
            "time_to_first_result_10_servers_warm_cache_ms": round(first_ms, 1),
            "servers_started_for_first_result": started_servers}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runtime = Runtime()
    runtime.build()
    count, repeats = (50, 10) if args.quick else (300, 40)
    report = {"round_trips": bench_round_trips(runtime, count), "search": bench_search(runtime, repeats),
              "discovery": bench_discovery_and_first_result(runtime)}  # fmt: skip
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
