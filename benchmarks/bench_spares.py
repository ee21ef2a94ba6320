"""Warm spares: what they save on the caller's path, and what they cost.

    python benchmarks/bench_spares.py [--profile default|science] [--runs N] [--json OUT]

Default profile (main venv):

  a. fresh-sandbox run of ``result = 1 + 1``, host wall time of `Sandbox.run_sync`, p50/p95,
     without spares and with one, workspaces on and off. "spare ready": each timed run starts
     once the spare is ready (the target's condition); "20 ms gaps": a request every 20 ms
     without waiting for anything (a spare may or may not be ready);
  b. throughput, runs back to back on 1 and 2 threads sharing one sandbox (as `serve` does),
     with and without spares, the four variants alternating over 7 rounds (median);
  c. memory per ready spare (private RSS of the process, /proc/self/smaps_rollup) and the
     process's CPU time while spares sit ready and nothing runs.

Science profile (``/work/sci-venv``; the image built): the trivial run and a numpy+pandas
run, without and with a ready spare; memory per ready spare.

Variants alternate run by run, so a drifting machine hits all of them alike. Every number
is a median (p95 where stated) of many samples: the machine is small and shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from typing import Any

from wasmexec import Limits, Sandbox
from wasmexec._sandbox.spares import SpareKey

TRIVIAL = "result = 1 + 1"
NUMPY_PANDAS = (
    "import numpy as np, pandas as pd\nresult = int(pd.DataFrame({'a': np.arange(1000) % 7}).groupby('a').size().sum())"
)


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(samples), 3), "p95_ms": round(pct(samples, 0.95), 3), "n": len(samples)}


def key_of(sandbox: Sandbox) -> SpareKey:
    files = sandbox.workspaces
    return SpareKey(sandbox.limits.fuel is not None, sandbox.limits.memory_bytes, files, None)


def timed(sandbox: Sandbox, code: str) -> float:
    started = time.perf_counter()
    result = sandbox.run_sync(code)
    elapsed = (time.perf_counter() - started) * 1000
    if not result["result"]["ok"]:
        raise RuntimeError(f"run failed: {result['result']}")
    return elapsed


def private_kib() -> int:
    """The process's private resident memory (anonymous and private file pages), in KiB."""
    with open("/proc/self/smaps_rollup") as file:
        fields = dict(line.split(":", 1) for line in file if ":" in line)
    return sum(int(fields[name].split()[0]) for name in ("Private_Clean", "Private_Dirty"))


def bench_latency(profile: str, code: str, runs: int, workspaces: bool, limits: Limits) -> dict[str, Any]:
    """Fresh-run latency without spares and with a ready spare, with no idle gap and after 20 ms idle,
    and at a request every 20 ms with spares that may or may not be ready."""
    off = Sandbox(limits, profile=profile, spares=0, workspaces=workspaces)
    on = Sandbox(limits, profile=profile, spares=1, workspaces=workspaces)
    gaps = Sandbox(limits, profile=profile, spares=1, workspaces=workspaces)
    for sandbox in (off, on, gaps):
        sandbox.prepare()
        timed(sandbox, code)  # the first run of each pays one-time costs
    names = ["no spares, no gap", "spare ready, no gap", "no spares, 20 ms idle", "spare ready, 20 ms idle",
             "spares, a request every 20 ms"]  # fmt: skip
    samples: dict[str, list[float]] = {name: [] for name in names}
    key = key_of(on)
    for _ in range(runs):
        timed(off, code)
        samples["no spares, no gap"].append(timed(off, code))  # right after another run
        on.spares.wait_ready(key, 30)
        samples["spare ready, no gap"].append(timed(on, code))  # right after the spare was made
        time.sleep(0.02)
        samples["no spares, 20 ms idle"].append(timed(off, code))
        on.spares.wait_ready(key, 30)
        time.sleep(0.02)
        samples["spare ready, 20 ms idle"].append(timed(on, code))
        time.sleep(0.02)
        samples["spares, a request every 20 ms"].append(timed(gaps, code))
    stats = {"on": on.spares.stats(), "gaps": gaps.spares.stats()}
    for sandbox in (off, on, gaps):
        sandbox.close()
    out: dict[str, Any] = {name: summary(values) for name, values in samples.items()}
    out["spares, a request every 20 ms"].update(hits=stats["gaps"].hits, misses=stats["gaps"].misses)
    out["spare ready, 20 ms idle"]["hits"] = stats["on"].hits
    return out


def throughput_once(sandbox: Sandbox, runs: int, threads: int) -> float:
    """Runs per second of `threads` threads running back to back on one sandbox (as a server does)."""
    barrier = threading.Barrier(threads + 1)

    def work() -> None:
        barrier.wait()
        for _ in range(runs):
            timed(sandbox, TRIVIAL)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return threads * runs / (time.perf_counter() - started)


def bench_throughput(runs: int, rounds: int = 7) -> dict[str, Any]:
    """Throughput at 1 and 2 threads, with and without spares; the variants alternate round by round."""
    sandboxes = {spares: Sandbox(Limits(), spares=spares) for spares in (0, 1)}
    for sandbox in sandboxes.values():
        sandbox.prepare()
        timed(sandbox, TRIVIAL)
    rates: dict[str, list[float]] = {}
    for _ in range(rounds):
        for threads in (1, 2):
            for spares, sandbox in sandboxes.items():
                name = f"{threads} thread(s), spares={spares}"
                rates.setdefault(name, []).append(throughput_once(sandbox, runs // rounds, threads))
    out: dict[str, Any] = {name: {"runs_per_s": round(statistics.median(values), 1), "rounds": len(values)}
                           for name, values in rates.items()}  # fmt: skip
    out["spare stats (spares=1)"] = vars(sandboxes[1].spares.stats())
    for sandbox in sandboxes.values():
        sandbox.close()
    return out


def bench_memory(profile: str, limits: Limits, count: int = 8) -> dict[str, Any]:
    """Private memory per ready spare (ready vs after closing them), and the CPU the process spends
    while they sit ready and nothing runs."""
    sandbox = Sandbox(limits, profile=profile, spares=count)
    sandbox.prepare()
    timed(sandbox, TRIVIAL)
    key = key_of(sandbox)
    sandbox.spares.fill(key)
    deadline = time.monotonic() + 120
    while sandbox.spares.stats().ready < count and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    ready = sandbox.spares.stats().ready
    cpu_before, wall_before = time.process_time(), time.monotonic()
    time.sleep(5)
    idle_cpu = time.process_time() - cpu_before
    idle_wall = time.monotonic() - wall_before
    with_spares = private_kib()
    sandbox.close()
    time.sleep(0.5)
    without = private_kib()
    return {"ready": ready, "private_mib_per_spare": round((with_spares - without) / 1024 / max(1, ready), 2),
            "idle_cpu_percent": round(100 * idle_cpu / idle_wall, 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["default", "science"], default="default")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    load = os.getloadavg()
    results: dict[str, Any] = {"profile": args.profile, "loadavg_before": [round(x, 2) for x in load]}
    if args.profile == "default":
        limits = Limits()
        for workspaces in (False, True):
            name = f"latency, workspaces {'on' if workspaces else 'off'}"
            log(name)
            results[name] = bench_latency("default", TRIVIAL, args.runs, workspaces, limits)
        log("throughput")
        results["throughput"] = bench_throughput(args.runs)
        log("memory")
        results["memory"] = bench_memory("default", limits)
    else:
        limits = Limits(timeout_ms=60_000)
        for name, code in (("trivial", TRIVIAL), ("numpy+pandas", NUMPY_PANDAS)):
            log(name)
            results[f"latency, {name}"] = bench_latency("science", code, args.runs, True, limits)
        log("memory")
        results["memory"] = bench_memory("science", limits, count=4)
    results["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(results, indent=2, default=lambda value: vars(value))
    print(text)
    if args.json:
        with open(args.json, "w") as file:
            file.write(text + "\n")


if __name__ == "__main__":
    main()
