"""Why fresh runs cost milliseconds and do not scale over threads: a what-if on the instance allocator.

    python benchmarks/bench_pooling.py [--quick]

Not part of bench_core.py: a diagnostic experiment. It runs the guest by hand (as in
bench_core's phase breakdown; epoch on, fuel off) on three engines that differ only in
wasmtime's instance allocator:

  on-demand         what wasmexec uses: each instance maps its memory copy-on-write
                    from the compiled image, so the pages a run writes are page faults;
  pooling           pre-reserved slots, reused across instances;
  pooling+resident  pooling, and slots keep up to 16 MiB of memory resident between
                    instances, so a run's writes no longer fault.

For each: fresh `1 + 1` latency, page faults and kernel time per run, and the speedup
of fib(22) runs on 2 threads vs 1 (with a GIL-free, wasm-free control first: on a shared
VM the second core is not always free). wasmtime-py does not wrap the pooling allocator;
wasmexec uses its C API through wasmtime's ctypes bindings (`wasmexec serve --pooling`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import sys
from typing import Any

from bench_core import (
    PARALLEL_CODE,
    TRIVIAL_CODE,
    Guest,
    Settings,
    compare_threads,
    log,
    per_run_usage,
    run_by_hand,
    summarize,
    timed,
)

from wasmexec import Limits, Runtime
from wasmexec._sandbox.pooling import Pooling


def load_guest(pooling: Pooling | None) -> Guest:
    """The default image's no-fuel guest as wasmexec loads it, on an engine with or without the pooling allocator
    (`wasmexec._sandbox.pooling`; the allocator is not baked into the compiled form)."""
    guest = Runtime(pooling=pooling).guest(False)
    return Guest(guest.engine, guest.component, guest.linker, False, True, guest.ticker)


def measure(guest: Guest, settings: Settings) -> dict[str, Any]:
    """Fresh-run latency and resource use, and the 2-thread speedup, for one engine."""
    limits = Limits(fuel=None)
    for _ in range(10):
        run_by_hand(guest, TRIVIAL_CODE, limits)
    before = resource.getrusage(resource.RUSAGE_SELF)
    walls = [timed(lambda: run_by_hand(guest, TRIVIAL_CODE, limits))[0] for _ in range(settings.fresh_runs)]
    usage = per_run_usage(before, resource.getrusage(resource.RUSAGE_SELF), settings.fresh_runs)
    threads = compare_threads(lambda: run_by_hand(guest, PARALLEL_CODE, limits), settings)
    return {"fresh run": summarize(walls), "per run": usage, "threads": threads}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    settings = Settings.for_mode(parser.parse_args(argv).quick)
    allocators = {
        "on-demand": None,
        "pooling": Pooling(slots=64),
        "pooling+resident 16 MiB": Pooling(slots=64, keep_resident_mb=16),
    }
    log(
        "| allocator | fresh `1 + 1` p50 | p95 | page faults / run | kernel ms / run | user ms / run "
        "| fib(22) 2 vs 1 thread | kernel cores on 2 threads |\n|---|---|---|---|---|---|---|---|"
    )
    data = os.urandom(32 << 20)
    control = compare_threads(lambda: hashlib.sha256(data).digest(), settings)
    log(f"| control: sha256, no wasm | - | - | - | - | - | x{control['speedup']:.2f} | - |")
    for name, pooling in allocators.items():
        result = measure(load_guest(pooling), settings)
        fresh, usage, threads = result["fresh run"], result["per run"], result["threads"]
        log(
            f"| {name} | {fresh['median_ms']:.2f} ms | {fresh['p95_ms']:.2f} ms | "
            f"{usage['minor page faults']:.0f} | {usage['system ms']:.2f} | {usage['user ms']:.2f} | "
            f"x{threads['speedup']:.2f} | {threads['kernel cores 2 threads']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
