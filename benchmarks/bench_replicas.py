"""`wasmexec serve --http` as a replica set: 1 vs 2 replicas behind HAProxy, restart-to-ready, RSS per replica.

    python benchmarks/bench_replicas.py [--quick] [--json OUT]

Needs `haproxy` on PATH (Debian: apt-get install haproxy). Every number goes through HAProxy running
deploy/haproxy.cfg (its `bind` and `server` lines rewritten for loopback ports, as the acceptance test
does), with one `server` line for "1 replica" and two for "2 replicas", so both sides pay the proxy.

- runs/s and per-call p50/p95 of `run_python` at concurrency 1, 4 and 8 (that many 2026-era clients,
  each calling in a loop), for a trivial run (`result = 1 + 1`) and a CPU-bound one (fib(24), about 0.1 s);
- restart to ready: from spawning `serve --http` to its `/healthz` answering 200 (compiled cache warm);
- RSS of each replica process (VmRSS) idle after start and after the load.

The load average is printed at start and end: the machine is shared, so read every number with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.test_replica_set import haproxy_config  # noqa: E402
from tests.helpers import free_port  # noqa: E402

TRIVIAL = "result = 1 + 1"
CPU_BOUND = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nresult = fib(24)"
READY_TIMEOUT_S = 120.0


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2), "n": len(ordered)}  # fmt: skip


def _healthy(port: int) -> bool:
    try:
        return httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2, trust_env=False).status_code == 200
    except httpx2.HTTPError:
        return False


def _wait(ready: Any, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def start_replica(stack: ExitStack, root: Path, name: str) -> tuple[subprocess.Popen[bytes], int, float]:
    """A `serve --http` replica; returns it, its port and the seconds from spawn to /healthz 200."""
    port = free_port()
    tmp = root / name
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "XDG_STATE_HOME": str(tmp)}
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "wasmexec", "serve", "--http", "--port", str(port),
                                "--replica-id", name, "--no-audit", "--max-concurrent-runs", "8",
                                "--max-queued-runs", "64"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    stack.callback(_stop, process)
    _wait(lambda: _healthy(port) or process.poll() is not None, f"{name} to be ready")
    if process.poll() is not None:
        raise SystemExit(f"{name} exited with {process.returncode}")
    return process, port, time.perf_counter() - started


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_haproxy(stack: ExitStack, root: Path, replicas: dict[str, int]) -> int:
    port = free_port()
    config = root / f"haproxy-{len(replicas)}.cfg"
    text = haproxy_config(port, replicas).replace("    log stdout format raw local0 info\n", "")
    config.write_text(text)
    process = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    stack.callback(_stop, process)
    seen: set[str] = set()

    def all_up() -> bool:
        try:
            response = httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=2, trust_env=False)
        except httpx2.HTTPError:
            return False
        seen.add(response.headers.get("x-replica", ""))
        return set(replicas) <= seen

    _wait(all_up, "HAProxy to reach every replica")
    return port


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def load(url: str, code: str, concurrency: int, total: int) -> dict[str, float]:
    """`total` calls of `code` from `concurrency` 2026-era clients at once; runs/s and latency quantiles."""
    from mcp import Client

    samples: list[float] = []
    remaining, connected = total, 0

    async def worker() -> None:
        nonlocal remaining, connected
        async with Client(url, mode="auto") as client:
            await client.call_tool("run_python", {"code": TRIVIAL})  # warm the connection
            connected += 1
            if connected == concurrency:
                all_connected.set()
            await ready.wait()
            while remaining > 0:
                remaining -= 1
                started = time.perf_counter()
                result = await client.call_tool("run_python", {"code": code})
                samples.append(time.perf_counter() - started)
                assert result.structured_content and result.structured_content["result"]["ok"], result

    ready, all_connected = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as group:
        for _ in range(concurrency):
            group.start_soon(worker)
        await all_connected.wait()  # the clock starts once every client is connected and warm
        began = time.perf_counter()
        ready.set()
    elapsed = time.perf_counter() - began
    return {"runs_per_s": round(len(samples) / elapsed, 1), **quantiles(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls per point")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    counts = {TRIVIAL: 60 if args.quick else 200, CPU_BOUND: 16 if args.quick else 48}
    results: dict[str, Any] = {"load_start": os.getloadavg(), "nproc": os.cpu_count(), "throughput": {}}
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        root = Path(scratch)
        replicas = {name: start_replica(stack, root, name) for name in ("replica-1", "replica-2")}
        results["ready_s"] = [round(ready, 2) for _, _, ready in replicas.values()]
        results["rss_idle_mb"] = {name: rss_mb(process.pid) for name, (process, _, _) in replicas.items()}
        for size in (1, 2):
            chosen = dict(list({name: port for name, (_, port, _) in replicas.items()}.items())[:size])
            with ExitStack() as proxy:
                url = f"http://127.0.0.1:{start_haproxy(proxy, root, chosen)}/mcp"
                for label, code in (("trivial", TRIVIAL), ("cpu", CPU_BOUND)):
                    for concurrency in (1, 4, 8):
                        point = anyio.run(load, url, code, concurrency, counts[code])
                        results["throughput"][f"{size} replica(s), {label}, c={concurrency}"] = point
                        print(f"{size} replica(s) {label:7} c={concurrency}: {point}", flush=True)
        results["rss_after_mb"] = {name: rss_mb(process.pid) for name, (process, _, _) in replicas.items()}
        restarts = []
        for index in range(3 if args.quick else 5):
            with ExitStack() as once:
                restarts.append(round(start_replica(once, root, f"restart-{index}")[2], 2))
        results["restart_to_ready_s"] = restarts
    results["load_end"] = os.getloadavg()
    print(json.dumps({k: v for k, v in results.items() if k != "throughput"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
