"""What the per-run /workspace costs (issue 8), measured against the same runs without one.

    python benchmarks/bench_workspace.py [--runs N] [--json OUT]

  1. ``result = 1 + 1`` through ``Sandbox.run_sync``, interleaved: ``Sandbox(workspaces=False)``
     (the baseline: no preopen at all) against the default sandbox (a fresh /workspace and /tmp).
  2. The host's own steps of a workspace, alone: a run directory from the pool, descriptors,
     the snapshot, the quota's start (inotify), the preopens into a ``WasiConfig``, the artifact
     scan, and the release (removal is queued for the reaper thread). What remains of the
     difference in 1 is the guest's ``os.chdir("/workspace")``: the store's first WASI file
     operation, reported on its own line (also timed inside the guest, with the bridge's chdir off).
  3. Throughput: a 10 MB input (``files={"in.bin": Path}``) read by the code, and a 10 MB artifact
     written by the code (scanned, hashed, moved into the ArtifactStore) and read back with
     ``read_artifact``; each minus the baseline run.

Numbers are medians (and p90) of wall-clock ``time.perf_counter``; the machine is shared, so
compare numbers within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wasmtime import WasiConfig

from wasmexec import Limits, Sandbox
from wasmexec._workspace.rundir_pool import default_pool
from wasmexec._workspace.workspace import RunWorkspace, check_inputs

MB = 10**6


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p90_ms": round(ordered[int(len(ordered) * 0.9)] * 1000, 3), "n": len(ordered)}  # fmt: skip


def _timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def fresh_runs(runs: int) -> dict[str, Any]:
    limits = Limits(timeout_ms=30_000)
    without, with_ = Sandbox(limits, workspaces=False), Sandbox(limits)
    without.prepare()
    for sandbox in (without, with_):
        for _ in range(20):
            sandbox.run_sync("result = 1 + 1")  # warm up: the pool fills, caches settle
    samples: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(runs):
        samples["without"].append(_timed(lambda: without.run_sync("result = 1 + 1")))
        samples["with"].append(_timed(lambda: with_.run_sync("result = 1 + 1")))
    stats = {name: _stats(values) for name, values in samples.items()}
    stats["added_p50_ms"] = round(stats["with"]["p50_ms"] - stats["without"]["p50_ms"], 3)
    return stats


def guest_first_chdir(runs: int) -> dict[str, Any]:
    """The guest's ``os.chdir("/workspace")`` timed inside the guest, as the store's first file operation
    (the bridge's own chdir is switched off for these runs), and a second file operation after it."""
    sandbox = Sandbox(Limits(timeout_ms=30_000))
    code = (
        "import os, time\n"
        "t = time.perf_counter_ns(); os.chdir('/workspace'); first = time.perf_counter_ns() - t\n"
        "t = time.perf_counter_ns(); os.stat('.'); second = time.perf_counter_ns() - t\n"
        "result = [first / 1e9, second / 1e9]"
    )
    original = RunWorkspace.guest_options
    RunWorkspace.guest_options = lambda self: {}  # type: ignore[method-assign]
    try:
        pairs = [sandbox.run_sync(code)["result"]["data"] for _ in range(runs)]
    finally:
        RunWorkspace.guest_options = original  # type: ignore[method-assign]
    return {"first_chdir": _stats([p[0] for p in pairs]), "second_op": _stats([p[1] for p in pairs])}


def host_steps(runs: int) -> dict[str, Any]:
    limits, pool, inputs = Limits(), default_pool(), check_inputs(None)
    samples = []
    for i in range(runs + 50):
        started = time.perf_counter()
        workspace = RunWorkspace(limits, pool, inputs)
        workspace.prepare()
        workspace.preopen(WasiConfig())
        workspace.check()
        workspace.collect(list_artifacts=True)
        workspace.release()
        if i >= 50:
            samples.append(time.perf_counter() - started)
    pool.wait_idle()
    return _stats(samples)


def throughput(rounds: int) -> dict[str, Any]:
    sandbox = Sandbox(Limits(timeout_ms=60_000))
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "in.bin"
        source.write_bytes(os.urandom(10 * MB))
        samples: dict[str, list[float]] = {"baseline": [], "in": [], "out": [], "read_artifact": []}
        for _ in range(rounds):
            samples["baseline"].append(_timed(lambda: sandbox.run_sync("result = 1 + 1")))
            samples["in"].append(_timed(lambda: sandbox.run_sync(
                "result = len(open('in.bin', 'rb').read())", files={"in.bin": source})))  # fmt: skip
            started = time.perf_counter()
            result = sandbox.run_sync("open('out.bin', 'wb').write(b'x' * 10_000_000)")
            samples["out"].append(time.perf_counter() - started)
            run_id = result["run_id"]
            samples["read_artifact"].append(_timed(lambda: sandbox.read_artifact(run_id, "out.bin")))  # noqa: B023
    stats = {name: _stats(values) for name, values in samples.items()}
    base = stats["baseline"]["p50_ms"]
    for name in ("in", "out"):
        extra = stats[name]["p50_ms"] - base
        stats[name]["over_baseline_ms"] = round(extra, 3)
        stats[name]["mb_per_s"] = round(10 / (extra / 1000), 1) if extra > 0 else None
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=300, help="runs per side in 1 and 2 (default 300)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of 3 (default 10)")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args()
    report: dict[str, Any] = {"load_start": os.getloadavg()}
    report["fresh_run"] = fresh_runs(args.runs)
    report["host_steps"] = host_steps(args.runs)
    report["guest"] = guest_first_chdir(max(args.runs // 3, 20))
    report["throughput_10mb"] = throughput(args.rounds)
    report["load_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
