"""Does rewriting the default component's libraries make CPU-bound code faster? An interleaved A/B.

    pip install -r benchmarks/requirements.txt     # icpp-binaryen (Binaryen's library)
    python benchmarks/bench_link.py [--variants fold,roundtrip] [--rounds 16] [--fifo]

Issue 19's row 7 (CPU-bound code vs native CPython). The default component, as the runtime built it,
is the baseline; each variant is made from it by `link_fold.py` in a subprocess (``fold``: the
libraries' link-time addresses made constants; ``roundtrip``: read and written back by Binaryen
unchanged, the control that shows what re-encoding alone does; ``O1``-``O3``: wasm-opt's pipeline on
every library, ``O2`` took 43 s to 2 min on libpython here) and compiled in a cache directory of its
own. Every sample runs one bench_core workload in a fresh sandbox (fuel off, epochs on) and reads the
time inside the code; each round runs every system once per workload, in an order rotated from round
to round (a system that always follows native json measured slower). Printed: medians, ratios to
native and to the baseline, paired per-round ratios with quartiles, process CPU time per run.

On a shared machine the wall clock varies 5x between samples of the same component: ``--fifo`` runs
this process (and the guest threads it starts) at SCHED_FIFO on the last CPU (root only; other
processes keep the rest), which brought the spread down to about 1.5x. Writes results_link.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import bench_core  # noqa: E402
from bench_targets import native_inside  # noqa: E402

from wasmexec import Limits, Runtime, Sandbox  # noqa: E402


def make_variant(base: Runtime, mode: str, directory: Path) -> Path:
    """A cache directory whose default image is the base component rewritten by `mode` ("base": as is)."""
    artifacts = base.artifacts
    wasm = artifacts.component_bytes()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    short = artifacts.image.removeprefix("sha256:")[:32]
    target = directory / artifacts.builder.names.wasm(short)
    if mode == "base":
        target.write_bytes(wasm)
    else:
        source = directory / "source.wasm"
        source.write_bytes(wasm)
        started = time.monotonic()
        subprocess.run([sys.executable, str(HERE / "link_fold.py"), str(source), str(target), mode],
                       check=True, stderr=subprocess.DEVNULL)  # fmt: skip
        bench_core.log(f"  {mode}: rewritten in {time.monotonic() - started:.1f} s")
        source.unlink()
    manifest = {"sandbox_image": artifacts.image, "builder": artifacts.builder.builder_version(),
                "component_sha256": hashlib.sha256(target.read_bytes()).hexdigest()}  # fmt: skip
    (directory / artifacts.builder.names.manifest(short)).write_text(json.dumps(manifest))
    return directory


def fifo_on_one_cpu() -> None:
    """Every thread of this process (the guest threads and epoch tickers exist by now) at SCHED_FIFO on
    the last CPU; threads started later inherit it."""
    cpu = {max(os.sched_getaffinity(0))}
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), cpu)
        os.sched_setscheduler(int(thread), os.SCHED_FIFO, os.sched_param(10))


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(systems: dict[str, Callable[[str], float]], rounds: int) -> dict[str, dict[str, dict[str, list[float]]]]:
    """{workload: {system: {"inside": [...], "cpu": [...]}}}, rounds interleaved and rotated."""
    samples = {name: {system: {"inside": [], "cpu": []} for system in systems} for name in bench_core.WORKLOADS}
    order = list(systems)
    for round_number in range(rounds):
        turn = order[round_number % len(order) :] + order[: round_number % len(order)]
        for name, code in bench_core.WORKLOADS.items():
            for system in turn:
                before = process_cpu()
                samples[name][system]["inside"].append(systems[system](code))
                samples[name][system]["cpu"].append(process_cpu() - before)
    return samples


def report(samples: dict[str, dict[str, dict[str, list[float]]]], base: str) -> dict[str, Any]:
    systems = list(next(iter(samples.values())))
    medians = {name: {s: statistics.median(v["inside"]) for s, v in by.items()} for name, by in samples.items()}
    summary: dict[str, Any] = {"medians_ms": {n: {s: m * 1e3 for s, m in by.items()} for n, by in medians.items()}}
    for system in systems:
        if system == "native":
            continue
        geomean = math.exp(statistics.fmean(math.log(medians[n][system] / medians[n]["native"]) for n in medians))
        paired = {}
        for name, by in samples.items():
            ratios = sorted(a / b for a, b in zip(by[system]["inside"], by[base]["inside"], strict=True))
            quartiles = statistics.quantiles(ratios, n=4)
            cpu = statistics.median(by[system]["cpu"]) / statistics.median(by[base]["cpu"])
            paired[name] = {"median": statistics.median(ratios), "q1": quartiles[0], "q3": quartiles[2], "cpu": cpu}
        summary[system] = {"geomean_vs_native": geomean, f"vs_{base}": paired}
        bench_core.log(
            f"{system}: geomean {geomean:.3f}x native; vs {base} per round: "
            + ", ".join(
                f"{n} {p['median']:.3f} [{p['q1']:.3f}-{p['q3']:.3f}] cpu {p['cpu']:.3f}" for n, p in paired.items()
            )
        )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="fold,roundtrip", help="comma-separated: fold, roundtrip, O1, O2, O3")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--fifo", action="store_true", help="SCHED_FIFO on the last CPU (root)")
    parser.add_argument("--work", type=Path, help="where the variants' cache dirs go (default: a temp dir)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-link-"))
    base = Runtime()
    bench_core.log(f"image {base.artifacts.image[:19]}…, variants in {work}")
    systems: dict[str, Callable[[str], float]] = {}
    for mode in ["base", *args.variants.split(",")]:
        started = time.monotonic()
        sandbox = Sandbox(Limits(), runtime=Runtime(make_variant(base, mode, work / mode)), spares=0)
        bench_core.run_ok(sandbox, "result = 1")  # compiles it
        bench_core.log(f"  {mode}: ready in {time.monotonic() - started:.1f} s")
        systems[mode] = lambda code, sandbox=sandbox: float(bench_core.run_ok(sandbox, code)["data"]["seconds"])
    systems["native"] = native_inside
    if args.fifo:
        fifo_on_one_cpu()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    samples = measure(systems, args.rounds)
    summary = report(samples, "base")
    summary["load"] = {"before": load_before, "after": Path("/proc/loadavg").read_text().split()[:3]}
    bench_core.log(f"load average {summary['load']['before']} -> {summary['load']['after']}")
    (HERE / "results_link.json").write_text(json.dumps({"summary": summary, "samples": samples}, indent=1))


if __name__ == "__main__":
    main()
