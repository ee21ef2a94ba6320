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
this uses its C API through wasmtime's ctypes bindings.
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
    engine_config,
    log,
    per_run_usage,
    run_by_hand,
    summarize,
    timed,
)
from wasmtime import Engine
from wasmtime import _bindings as ffi
from wasmtime.component import Component, Linker

from wasmexec import Limits, Runtime
from wasmexec._limits import MAX_MEMORY_MB
from wasmexec._sandbox import epoch as _epoch
from wasmexec._sandbox import hostcalls as _hostcalls
from wasmexec._sandbox.runtime import engine_key

#: Room for a few dozen live instances of the guest component (it has several core instances).
POOLING_LIMITS = {
    "total_component_instances": 64,
    "total_core_instances": 1024,
    "total_memories": 128,
    "total_tables": 1024,
    "total_stacks": 0,
    "max_core_instances_per_component": 64,
    "max_memories_per_component": 16,
    "max_tables_per_component": 64,
    "max_memory_size": MAX_MEMORY_MB << 20,
    "table_elements": 200_000,
    "max_core_instance_size": 4 << 20,
    "max_component_instance_size": 4 << 20,
}


def make_engine(pooling: bool, keep_resident_mib: int = 0) -> Engine:
    """wasmexec's no-fuel engine configuration, on the on-demand or the pooling allocator."""
    config = engine_config(fuel=False, epoch=True)
    if pooling:
        settings = dict(
            POOLING_LIMITS,
            linear_memory_keep_resident=keep_resident_mib << 20,
            table_keep_resident=keep_resident_mib << 20,
        )
        pool = ffi.wasmtime_pooling_allocation_config_new()
        for name, value in settings.items():
            getattr(ffi, f"wasmtime_pooling_allocation_config_{name}_set")(pool, value)
        ffi.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)  # copies the settings
        ffi.wasmtime_pooling_allocation_config_delete(pool)
    return Engine(config)


def load_guest(runtime: Runtime, engine: Engine) -> Guest:
    """The guest compiled by wasmexec for its no-fuel engine, loaded into `engine` (the allocator is not baked in)."""
    runtime.guest(False)  # compiles it if this image is new
    path = runtime.artifacts.directory / runtime.artifacts.compiled_name(runtime.sandbox_image, engine_key(False))
    linker = Linker(engine)
    linker.add_wasip2()
    _hostcalls.register(linker)
    return Guest(engine, Component.deserialize_file(engine, str(path)), linker, False, True, _epoch.EpochTicker(engine))


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
    runtime = Runtime()
    engines = {
        "on-demand": make_engine(pooling=False),
        "pooling": make_engine(pooling=True),
        "pooling+resident 16 MiB": make_engine(pooling=True, keep_resident_mib=16),
    }
    log(
        "| allocator | fresh `1 + 1` p50 | p95 | page faults / run | kernel ms / run | user ms / run "
        "| fib(22) 2 vs 1 thread | kernel cores on 2 threads |\n|---|---|---|---|---|---|---|---|"
    )
    data = os.urandom(32 << 20)
    control = compare_threads(lambda: hashlib.sha256(data).digest(), settings)
    log(f"| control: sha256, no wasm | - | - | - | - | - | x{control['speedup']:.2f} | - |")
    for name, engine in engines.items():
        result = measure(load_guest(runtime, engine), settings)
        fresh, usage, threads = result["fresh run"], result["per run"], result["threads"]
        log(
            f"| {name} | {fresh['median_ms']:.2f} ms | {fresh['p95_ms']:.2f} ms | "
            f"{usage['minor page faults']:.0f} | {usage['system ms']:.2f} | {usage['user ms']:.2f} | "
            f"x{threads['speedup']:.2f} | {threads['kernel cores 2 threads']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
