"""Fresh-sandbox and cold-start latency of this checkout against another commit, in one run.

A claim that a change made something no slower must compare against the previous
commit measured on the same machine at the same time. This script checks the other
commit out into a temporary git worktree and measures both trees interleaved, round
by round, so that load from other jobs falls on both alike:

- fresh sandbox: host wall time of `Sandbox().run_sync("result = 1 + 1")` (fuel+epoch,
  the default limits) in a long-lived process per tree, after warm-up;
- cold start: `python -m wasmexec run -c "result = 1"` as a new process, compiled
  cache warm (each tree builds and compiles its own artifacts once, before timing).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_compare.py --base HEAD~1
    .venv/bin/python benchmarks/bench_compare.py --base 83b267f --rounds 7 --json OUT

It prints p50/p95 per tree and the ratio (this tree / base) with the load average at
start and end.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Runs in one fresh-sandbox sample batch, and warm-up runs before the first batch.
FRESH_RUNS_PER_ROUND = 60
FRESH_WARMUP = 20
#: Process starts per round for the cold-start measure.
COLD_STARTS_PER_ROUND = 4

_FRESH_WORKER = """
import json, sys, time
from wasmexec import Sandbox
sandbox = Sandbox()
for _ in range(int(sys.argv[1])):
    sandbox.run_sync("result = 1 + 1")
print("ready", flush=True)
for line in sys.stdin:
    samples = []
    for _ in range(int(line)):
        started = time.perf_counter()
        result = sandbox.run_sync("result = 1 + 1")
        samples.append((time.perf_counter() - started) * 1000)
        assert result["result"]["ok"], result
    print(json.dumps(samples), flush=True)
"""


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    return env


class FreshWorker:
    """A long-lived process that times fresh-sandbox runs from one tree on request."""

    def __init__(self, tree: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _FRESH_WORKER, str(FRESH_WARMUP)],
            cwd=tree, env=_env(tree), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the fresh-sandbox worker of {tree} did not start")

    def sample(self, runs: int) -> list[float]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{runs}\n")
        self.process.stdin.flush()
        samples: list[float] = json.loads(self.process.stdout.readline())
        return samples

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def cold_start(tree: Path) -> float:
    """Milliseconds for one `wasmexec run` process, start to exit."""
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "wasmexec", "run", "--no-audit", "-c", "result = 1"],
        cwd=tree, env=_env(tree), capture_output=True, text=True, check=False,
    )  # fmt: skip
    elapsed = (time.perf_counter() - started) * 1000
    if completed.returncode != 0:
        raise RuntimeError(f"wasmexec run failed in {tree}: {completed.stderr[-2000:]}")
    return elapsed


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
        "n": len(ordered),
    }


def measure(trees: dict[str, Path], rounds: int) -> dict[str, Any]:
    for tree in trees.values():  # builds/compiles (once) and warms the page cache
        cold_start(tree)
    workers = {name: FreshWorker(tree) for name, tree in trees.items()}
    fresh: dict[str, list[float]] = {name: [] for name in trees}
    cold: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for index in range(rounds):
            order = list(trees) if index % 2 == 0 else list(reversed(trees))
            for name in order:
                fresh[name] += workers[name].sample(FRESH_RUNS_PER_ROUND)
                cold[name] += [cold_start(trees[name]) for _ in range(COLD_STARTS_PER_ROUND)]
            print(f"round {index + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        for worker in workers.values():
            worker.close()
    return {
        name: {"fresh_sandbox_ms": percentiles(fresh[name]), "cold_start_ms": percentiles(cold[name])} for name in trees
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base", required=True, help="the commit to compare against (e.g. HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args()
    base_commit = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="wasmexec-base-") as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), base_commit], cwd=ROOT, check=True)
        try:
            load_start = os.getloadavg()
            results = measure({"this": ROOT, f"base {base_commit}": base}, args.rounds)
            load_end = os.getloadavg()
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    (this, base_name) = list(results)
    report = {
        "base": base_commit,
        "load_average": {"start": load_start[0], "end": load_end[0]},
        "results": results,
        "ratio_this_over_base": {
            measure_name: round(results[this][measure_name]["p50"] / results[base_name][measure_name]["p50"], 3)
            for measure_name in ("fresh_sandbox_ms", "cold_start_ms")
        },
    }
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
