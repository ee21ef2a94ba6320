"""Core benchmarks of wasmexec, all in one run.

    python benchmarks/bench_core.py [--quick] [--json OUT]
    python benchmarks/bench_core.py --summary-from OUT     # reprint the tables of an earlier run

Sections (see benchmarks/README.md and docs/performance.md for the measured numbers and targets):

  a. a fresh sandbox per run of ``result = 1 + 1``, fuel on and off, and its phases;
  b. process cold start of ``wasmexec run`` with a warm compiled cache, and its phases;
  c. CPU/stdlib workloads: native CPython, wasm (fuel+epoch, epoch only, neither) and Pyodide;
  d. parallel throughput of a CPU-bound workload on 1 vs 2 threads (and processes, and a control);
  e. resident memory per live (sleeping) sandbox;
  f. first-ever start: ``wasmexec build`` into an empty cache directory (skipped with --quick).

Every Sandbox here has ``spares=0`` (an instance made on the caller's path, as before warm
spares existed); ``bench_spares.py`` measures runs that find a warm spare ready.

Every number is a median (and p95 where many samples exist) of several samples: the
benchmark machine is small and shared. Times are wall-clock ``time.perf_counter``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import multiprocessing
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmtime import Config, Engine, Store, WasiConfig
from wasmtime.component import Component, Linker

from wasmexec import Limits, Runtime, Sandbox
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import NoTools
from wasmexec._sandbox import epoch as _epoch
from wasmexec._sandbox import hostcalls as _hostcalls
from wasmexec._sandbox import run as _run
from wasmexec._sandbox.runtime import engine_key, wasmtime_version

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
WASMEXEC_CLI = str(Path(sys.executable).with_name("wasmexec"))
CACHE_DIR = HERE / ".cache"  # compiled no-epoch variant of the guest (benchmark only)

TRIVIAL_CODE = "result = 1 + 1"
SLEEP_CODE = "import time\ntime.sleep(2)\nresult = 'slept'"
CONTROL = "control: sha256, no wasm"
PROCESSES = "fuel+epoch, 2 processes instead of threads"
PARALLEL_CODE = """
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
result = fib(22)
"""

#: Each workload sets ``result = {"seconds": <time inside, perf_counter>, "check": <value>}``.
#: Inputs are built before the clock starts; only the named work is timed.
WORKLOADS: dict[str, str] = {
    "fib(25)": """
import time
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
started = time.perf_counter()
value = fib(25)
result = {"seconds": time.perf_counter() - started, "check": value}
""",
    "json 100k dicts": """
import json, time
rows = [{"id": i, "name": "item%d" % i, "price": i * 0.25, "tags": ["a", "b"], "ok": i % 2 == 0}
        for i in range(100_000)]
started = time.perf_counter()
back = json.loads(json.dumps(rows))
result = {"seconds": time.perf_counter() - started, "check": len(back)}
""",
    "regex 1 MiB": """
import re, time
words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
text = " ".join(words[i * 7 % 8] + str(i % 97) for i in range(200_000))[: 1 << 20]
started = time.perf_counter()
found = re.findall(r"\\b[a-z]+\\d+\\b", text)
result = {"seconds": time.perf_counter() - started, "check": len(found)}
""",
}

#: Runs code in a fresh CPython process: the native baseline of a workload.
NATIVE_HARNESS = """
import json, sys, time
code = sys.stdin.read()
namespace = {"__name__": "__main__"}
started = time.perf_counter()
exec(code, namespace)
wall = time.perf_counter() - started
print(json.dumps({"result": namespace["result"], "wall": wall}))
"""

#: Times the phases of ``wasmexec run`` in one fresh process (the cache must be warm).
COLD_PHASES_SCRIPT = """
import json, time
t0 = time.perf_counter()
import wasmexec._sandbox.run, wasmexec._sandbox.runtime
from wasmexec._limits import Limits
from wasmexec._runctx.toolhost import NoTools
from wasmexec._redact import Redactor
t1 = time.perf_counter()
runtime = wasmexec._sandbox.runtime.Runtime()
t2 = time.perf_counter()
runtime.guest(True)
t3 = time.perf_counter()
result, _ = wasmexec._sandbox.run.execute(runtime, "result = 1", Limits(), NoTools(), Redactor())
t4 = time.perf_counter()
assert result["result"]["ok"], result
print(json.dumps({"imports": t1 - t0, "Runtime()": t2 - t1, "deserialize": t3 - t2, "first run": t4 - t3}))
"""


@dataclass(frozen=True)
class Settings:
    """How many samples each section takes (--quick lowers them)."""

    quick: bool
    fresh_runs: int
    cold_repeats: int
    workload_repeats: int
    pyodide_loads: int
    parallel_runs: int
    parallel_rounds: int
    memory_sandboxes: int

    @classmethod
    def for_mode(cls, quick: bool) -> Settings:
        if quick:
            return cls(
                True,
                fresh_runs=60,
                cold_repeats=5,
                workload_repeats=2,
                pyodide_loads=1,
                parallel_runs=16,
                parallel_rounds=2,
                memory_sandboxes=8,
            )
        return cls(
            False,
            fresh_runs=300,
            cold_repeats=20,
            workload_repeats=7,
            pyodide_loads=3,
            parallel_runs=32,
            parallel_rounds=5,
            memory_sandboxes=16,
        )


# -- statistics and small helpers -------------------------------------------------------------


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    """Median, p95 (nearest rank), min and max in milliseconds, and the sample count."""
    ordered = sorted(seconds)
    rank = max(0, math.ceil(0.95 * len(ordered)) - 1)
    return {
        "median_ms": statistics.median(ordered) * 1e3,
        "p95_ms": ordered[rank] * 1e3,
        "min_ms": ordered[0] * 1e3,
        "max_ms": ordered[-1] * 1e3,
        "n": len(ordered),
    }


def ratio(value: float | None, baseline: float | None) -> float | None:
    """value / baseline, or None when either is missing."""
    if value is None or not baseline:
        return None
    return value / baseline


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """Runs `action`; returns its wall time in seconds and its return value."""
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def rss_mib() -> float:
    """This process's resident set size (VmRSS) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_ok(sandbox: Sandbox, code: str) -> dict[str, Any]:
    """Runs `code` and returns the run's `result` part; raises if the run failed."""
    outcome = sandbox.run_sync(code)["result"]
    if not outcome["ok"]:
        raise RuntimeError(f"sandbox run failed: {outcome['error']}")
    return outcome


def settle() -> None:
    """Waits until finished stores are closed (older wasmexec versions close them on a reaper thread)."""
    reaper = getattr(_run, "_reaper", None)
    if reaper is not None:
        reaper.drain()
    gc.collect()


def per_run_usage(before: Any, after: Any, runs: int) -> dict[str, float]:
    """Minor page faults and user/kernel CPU time per run between two getrusage snapshots."""
    return {
        "minor page faults": (after.ru_minflt - before.ru_minflt) / runs,
        "user ms": (after.ru_utime - before.ru_utime) / runs * 1e3,
        "system ms": (after.ru_stime - before.ru_stime) / runs * 1e3,
    }


def log(message: str) -> None:
    """Progress and results go to stdout as they come."""
    print(message, flush=True)


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    """A number for the report, or '-' when it was not measured."""
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


# -- the machine ------------------------------------------------------------------------------


def machine_info(runtime: Runtime) -> dict[str, Any]:
    """Cores, CPU model, Python, guest Python, wasmtime, Node and Pyodide versions."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    guest = run_ok(Sandbox(Limits(fuel=None), runtime=runtime), "import sys\nresult = sys.version")["data"]
    pyodide_package = HERE / "node_modules" / "pyodide" / "package.json"
    return {
        "nproc": subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip(),
        "cpu": cpu,
        "python": sys.version.split()[0],
        "guest_python": guest.split()[0],
        "wasmtime_py": wasmtime_version(),
        "node": _command_output(["node", "--version"]),
        "pyodide": json.loads(pyodide_package.read_text())["version"] if pyodide_package.is_file() else None,
        "loadavg_at_start": os.getloadavg(),
        "sandbox_image": runtime.sandbox_image,
        "git_head": _command_output(["git", "-C", str(HERE), "describe", "--always", "--dirty"]),
    }


def _command_output(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


# -- running the guest by hand (phases, and an engine without epochs) --------------------------


def engine_config(fuel: bool, epoch: bool) -> Config:
    """A wasmtime Config like wasmexec's (`_runtime.make_engine`), with fuel and epochs chosen."""
    config = Config()
    config.epoch_interruption = epoch
    config.consume_fuel = fuel
    config.cranelift_opt_level = "speed"
    return config


def make_bare_engine() -> Engine:
    """An engine like wasmexec's but with neither fuel nor epoch interruption (not a safe sandbox)."""
    return Engine(engine_config(fuel=False, epoch=False))


@dataclass
class Guest:
    """What instantiating the guest by hand needs: an engine, its compiled component and linker."""

    engine: Engine
    component: Component
    linker: Linker
    fuel: bool
    epoch: bool
    ticker: _epoch.EpochTicker | None


def guest_of(runtime: Runtime, fuel: bool) -> Guest:
    """The guest as wasmexec prepares it for one limit mode."""
    prepared = runtime.guest(fuel)
    return Guest(prepared.engine, prepared.component, prepared.linker, fuel, True, prepared.ticker)


def bare_guest(runtime: Runtime, compile_if_missing: bool) -> Guest | None:
    """The guest compiled for `make_bare_engine`, cached under benchmarks/.cache; None if not cached and not allowed."""
    engine = make_bare_engine()
    # Keyed by the component itself: the sandbox image names the sources, and two builds of them differ.
    path = (
        CACHE_DIR
        / f"{runtime.artifacts.component_digest().removeprefix('sha256:')[:32]}-{engine_key(False)}-noepoch.cwasm"
    )
    if path.is_file():
        component = Component.deserialize_file(engine, str(path))
    elif compile_if_missing:
        log("  (compiling the guest once for an engine without epochs; cached in benchmarks/.cache)")
        component = Component(engine, runtime.artifacts.component_bytes())
        CACHE_DIR.mkdir(exist_ok=True)
        for stale in CACHE_DIR.glob("*-noepoch.cwasm"):  # compiled for earlier guest images
            stale.unlink()
        path.write_bytes(bytes(component.serialize()))
    else:
        return None
    linker = Linker(engine)
    linker.add_wasip2()
    _hostcalls.register(linker)
    return Guest(engine, component, linker, False, False, None)


def run_by_hand(guest: Guest, code: str, limits: Limits) -> tuple[dict[str, float], Any]:
    """Does what `_run.execute` does around the guest call, timing each phase.

    Returns the phase times in seconds and the `result` value of the code. WASI output is
    discarded instead of captured; everything else is set up as execute sets it up.
    """
    phases: dict[str, float] = {}
    state = RunState(limits=limits, tools=NoTools(), run_id="bench")
    started = time.perf_counter()
    store = Store(guest.engine)
    wasi = WasiConfig()
    wasi.stdout_custom = lambda chunk: None
    wasi.stderr_custom = lambda chunk: None
    store.set_wasi(wasi)
    store.set_limits(memory_size=limits.memory_bytes)
    if guest.fuel:
        store.set_fuel(limits.fuel)
    if guest.epoch:
        _epoch.watch_store(store, state.should_stop)
    options = json.dumps({"max_result_bytes": limits.max_result_bytes})
    phases["store + WasiConfig"] = time.perf_counter() - started
    with guest.ticker or contextlib.nullcontext(), _hostcalls.bind(state):
        started = time.perf_counter()
        instance = guest.linker.instantiate(store, guest.component)
        phases["instantiate"] = time.perf_counter() - started
        started = time.perf_counter()
        run = instance.get_func(store, "run")
        report = json.loads(run(store, code, options))
        phases["export call"] = time.perf_counter() - started
    started = time.perf_counter()
    store.close()
    phases["store close"] = time.perf_counter() - started
    if not report.get("ok"):
        raise RuntimeError(f"guest run failed: {report}")
    return phases, json.loads(report.get("data_json", "null"))


# -- a. fresh sandbox per run -----------------------------------------------------------------


def bench_fresh_sandbox(runtime: Runtime, settings: Settings) -> dict[str, Any]:
    """Host wall time of `Sandbox.run_sync("result = 1 + 1")`, fuel on and off, and its phases.

    run_sync and the by-hand phase timing alternate, so drifting machine speed hits both
    alike; what run_sync costs beyond the phases is wasmexec's host-side bookkeeping (run
    state, result building, redaction, digests). Page faults and CPU time are per run,
    averaged over both.
    """
    results: dict[str, Any] = {}
    for label, limits in (("fuel+epoch", Limits()), ("epoch only", Limits(fuel=None))):
        sandbox = Sandbox(limits, runtime=runtime, spares=0)
        guest = guest_of(runtime, limits.fuel is not None)
        for _ in range(10):  # warm-up: page in the compiled code, start the epoch ticker
            run_ok(sandbox, TRIVIAL_CODE)
            run_by_hand(guest, TRIVIAL_CODE, limits)
        walls: list[float] = []
        phase_samples: dict[str, list[float]] = {}
        before = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(settings.fresh_runs):
            walls.append(timed(lambda sandbox=sandbox: run_ok(sandbox, TRIVIAL_CODE))[0])
            phases, _ = run_by_hand(guest, TRIVIAL_CODE, limits)
            for name, seconds in phases.items():
                phase_samples.setdefault(name, []).append(seconds)
        settle()
        usage = per_run_usage(before, resource.getrusage(resource.RUSAGE_SELF), 2 * settings.fresh_runs)
        wall = summarize(walls)
        phase_summary = {name: summarize(samples) for name, samples in phase_samples.items()}
        bookkeeping = wall["median_ms"] - sum(summary["median_ms"] for summary in phase_summary.values())
        results[label] = {
            "run_sync": wall,
            "phases": phase_summary,
            "host bookkeeping ms": bookkeeping,
            "per run": usage,
        }
        log(
            f"  {label}: run_sync p50 {wall['median_ms']:.2f} ms, p95 {wall['p95_ms']:.2f} ms; phases p50 "
            + ", ".join(f"{name} {summary['median_ms']:.2f}" for name, summary in phase_summary.items())
            + f", rest of run_sync {bookkeeping:.2f}; per run {usage['minor page faults']:.0f} page faults, "
            f"{usage['user ms']:.2f} ms user CPU, {usage['system ms']:.2f} ms kernel CPU"
        )
    return results


# -- b. process cold start --------------------------------------------------------------------


def time_process(argv: list[str], stdin: str | None = None) -> tuple[float, str]:
    """Wall time and stdout of one run of a command (which must exit 0)."""
    seconds, completed = timed(lambda: subprocess.run(argv, input=stdin, capture_output=True, text=True))
    if completed.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {completed.stderr[-2000:]}")
    return seconds, completed.stdout


def bench_cold_start(settings: Settings) -> dict[str, Any]:
    """`wasmexec run -c "result = 1"` as a new process, a bare `python -c pass`, and the phases between.

    The three are interleaved per repeat so that machine load drifting hits them alike. The
    phases script's own wall time minus its phases is interpreter startup and exit.
    """
    cli_argv = [WASMEXEC_CLI, "run", "-c", "result = 1"]
    for _ in range(2):  # warm the page cache
        time_process(cli_argv)
    samples: dict[str, list[float]] = {}
    for _ in range(settings.cold_repeats):
        samples.setdefault("wasmexec run", []).append(time_process(cli_argv)[0])
        samples.setdefault("python -c pass", []).append(time_process([PYTHON, "-c", "pass"])[0])
        wall, stdout = time_process([PYTHON, "-c", COLD_PHASES_SCRIPT])
        phases = json.loads(stdout)
        phases["startup + exit"] = wall - sum(phases.values())
        for name, seconds in phases.items():
            samples.setdefault(name, []).append(seconds)
        samples.setdefault("phases script total", []).append(wall)
    summaries = {name: summarize(values) for name, values in samples.items()}
    log(
        "  p50 "
        + ", ".join(f"{name} {summary['median_ms']:.1f} ms" for name, summary in summaries.items())
        + f"; wasmexec run p95 {summaries['wasmexec run']['p95_ms']:.0f} ms"
    )
    return summaries


# -- c. workloads -----------------------------------------------------------------------------


def run_native(code: str) -> tuple[float, float]:
    """Runs `code` in a fresh CPython process; returns (time inside, exec wall) in seconds."""
    answer = json.loads(time_process([PYTHON, "-c", NATIVE_HARNESS], stdin=code)[1])
    return answer["result"]["seconds"], answer["wall"]


def run_sandboxed(sandbox: Sandbox, code: str) -> tuple[float, float]:
    """Runs `code` in a fresh sandbox; returns (time inside, host wall of run_sync) in seconds."""
    wall, outcome = timed(lambda: run_ok(sandbox, code))
    return outcome["data"]["seconds"], wall


def run_bare(guest: Guest, code: str) -> tuple[float, float]:
    """Runs `code` on the engine without fuel or epochs; returns (time inside, host wall)."""
    wall, (_, data) = timed(lambda: run_by_hand(guest, code, Limits(fuel=None)))
    return data["seconds"], wall


def run_pyodide(loads: int, repeats: int, workloads: dict[str, str]) -> dict[str, Any]:
    """Runs pyodide_bench.mjs; returns its JSON answer, or {"error": ...} if Pyodide is unavailable."""
    if not (HERE / "node_modules" / "pyodide").is_dir():
        return {"error": "pyodide is not installed: run `npm ci` in benchmarks/"}
    config = json.dumps({"loads": loads, "repeats": repeats, "workloads": workloads})
    try:
        completed = subprocess.run(
            ["node", str(HERE / "pyodide_bench.mjs")],
            input=config,
            capture_output=True,
            text=True,
            cwd=HERE,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"node could not run: {exc}"}
    if completed.returncode != 0:
        return {"error": completed.stderr.strip()[-2000:]}
    return json.loads(completed.stdout)


def bench_workloads(runtime: Runtime, settings: Settings) -> dict[str, Any]:
    """Each workload natively, in wasm (three engine variants) and in Pyodide: inside time and host wall."""
    runners: dict[str, Callable[[str], tuple[float, float]]] = {"native": run_native}
    for label, limits in (("wasm fuel+epoch", Limits()), ("wasm epoch only", Limits(fuel=None))):
        sandbox = Sandbox(limits, runtime=runtime, spares=0)
        sandbox.prepare()
        runners[label] = lambda code, sandbox=sandbox: run_sandboxed(sandbox, code)
    bare = bare_guest(runtime, compile_if_missing=not settings.quick)
    if bare is not None:
        runners["wasm neither"] = lambda code: run_bare(bare, code)
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        name: {mode: {"inside": [], "wall": []} for mode in runners} for name in WORKLOADS
    }
    for _ in range(settings.workload_repeats):  # interleaved, so drifting machine load hits every mode alike
        for name, code in WORKLOADS.items():
            for mode, runner in runners.items():
                inside, wall = runner(code)
                samples[name][mode]["inside"].append(inside)
                samples[name][mode]["wall"].append(wall)
    pyodide = run_pyodide(settings.pyodide_loads, settings.workload_repeats, WORKLOADS)
    results: dict[str, Any] = {
        "pyodide": {key: value for key, value in pyodide.items() if key != "workloads"},
        "workloads": {},
    }
    if "load_ms" in pyodide:
        results["pyodide"]["load"] = summarize([ms / 1e3 for ms in pyodide["load_ms"]])
    for name in WORKLOADS:
        modes = {
            mode: {"inside": summarize(values["inside"]), "wall": summarize(values["wall"])}
            for mode, values in samples[name].items()
        }
        if name in pyodide.get("workloads", {}):
            entry = pyodide["workloads"][name]
            modes["pyodide"] = {"inside": summarize(entry["inside_s"]), "wall": summarize(entry["wall_s"])}
        native = modes["native"]
        for mode in modes.values():
            mode["inside_ratio"] = ratio(mode["inside"]["median_ms"], native["inside"]["median_ms"])
            mode["wall_ratio"] = ratio(mode["wall"]["median_ms"], native["wall"]["median_ms"])
        results["workloads"][name] = modes
        log(
            f"  {name}: "
            + "; ".join(
                f"{mode} {values['inside']['median_ms']:.0f} ms (x{values['inside_ratio']:.2f})"
                for mode, values in modes.items()
            )
        )
    if "error" in pyodide:
        log(f"  pyodide: {pyodide['error']}")
    return results


def overheads(workloads: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per workload, what fuel and epochs cost in time inside the guest, in percent.

    From medians, and from minimums as a check: on a loaded machine the minimum is
    closer to the uncontended cost.
    """
    costs: dict[str, dict[str, float | None]] = {}
    for name, modes in workloads.items():
        costs[name] = {}
        for stat in ("median", "min"):
            fuel = modes["wasm fuel+epoch"]["inside"][f"{stat}_ms"]
            epoch = modes["wasm epoch only"]["inside"][f"{stat}_ms"]
            neither = modes["wasm neither"]["inside"][f"{stat}_ms"] if "wasm neither" in modes else None
            costs[name][f"fuel_pct_{stat}"] = (fuel / epoch - 1) * 100
            costs[name][f"epoch_pct_{stat}"] = (epoch / neither - 1) * 100 if neither else None
    return costs


# -- d. parallel throughput -------------------------------------------------------------------


def run_batch(job: Callable[[], Any], runs: int, threads: int) -> tuple[float, float, float]:
    """Runs `job` `runs` times on `threads` threads; returns the wall time and the cores used (user, kernel)."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        cpu, started = os.times(), time.perf_counter()
        list(pool.map(lambda _: job(), range(runs)))
        wall, used = time.perf_counter() - started, os.times()
        return wall, (used.user - cpu.user) / wall, (used.system - cpu.system) / wall


def compare_threads(job: Callable[[], Any], settings: Settings) -> dict[str, float]:
    """Median wall time of a batch of `job` runs on 1 and on 2 threads, interleaved, and the speedup."""
    run_batch(job, 4, 2)  # warm-up
    rounds: dict[int, list[tuple[float, float, float]]] = {1: [], 2: []}
    for _ in range(settings.parallel_rounds):
        for threads in (1, 2):
            rounds[threads].append(run_batch(job, settings.parallel_runs, threads))
    entry: dict[str, float] = {"runs": settings.parallel_runs}
    for threads, samples in rounds.items():
        label = "1 thread" if threads == 1 else f"{threads} threads"
        entry[f"{label} s"] = statistics.median(wall for wall, _, _ in samples)
        entry[f"user cores {label}"] = statistics.median(user for _, user, _ in samples)
        entry[f"kernel cores {label}"] = statistics.median(system for _, _, system in samples)
        entry[f"runs/s {label}"] = settings.parallel_runs / entry[f"{label} s"]
    entry["speedup"] = entry["1 thread s"] / entry["2 threads s"]
    return entry


_worker_sandbox: Sandbox | None = None


def _worker_init() -> None:
    """Process-pool initializer: one default sandbox per worker process, ready to run."""
    global _worker_sandbox
    _worker_sandbox = Sandbox(Limits(), spares=0)
    _worker_sandbox.prepare()


def _worker_run_wasm(_: int) -> None:
    """Process-pool job: one fib(22) run in the worker's sandbox."""
    assert _worker_sandbox is not None
    run_ok(_worker_sandbox, PARALLEL_CODE)


def compare_processes(job: Callable[[int], None], settings: Settings) -> dict[str, float]:
    """Like `compare_threads`, but the jobs go to 1 or 2 worker processes (spawned, so no forked wasmtime)."""
    context = multiprocessing.get_context("spawn")
    pools = {workers: ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init) for workers in (1, 2)}
    try:
        for workers, pool in pools.items():  # start and warm every worker
            list(pool.map(job, range(8 * workers)))
        walls: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(settings.parallel_rounds):
            for workers, pool in pools.items():
                walls[workers].append(timed(lambda pool=pool: list(pool.map(job, range(settings.parallel_runs))))[0])
    finally:
        for pool in pools.values():
            pool.shutdown()
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    return {"runs": settings.parallel_runs, "1 process s": one, "2 processes s": two, "speedup": one / two}


def bench_parallel(runtime: Runtime, settings: Settings) -> dict[str, Any]:
    """Throughput of fib(22) runs on 1 vs 2 threads, per limit mode; and two diagnostics.

    Diagnostics: a control batch (sha256 of 32 MiB, which releases the GIL and uses no wasm)
    shows what the machine itself allows: on a shared VM the second core is often not free.
    The same fib(22) runs on 1 vs 2 worker processes show whether sharing one process is the
    limit.
    """
    data = os.urandom(32 << 20)
    jobs: dict[str, Callable[[], Any]] = {}
    for label, limits in (("fuel+epoch", Limits()), ("epoch only", Limits(fuel=None))):
        sandbox = Sandbox(limits, runtime=runtime, max_concurrent_runs=2, spares=0)
        jobs[label] = lambda sandbox=sandbox: run_ok(sandbox, PARALLEL_CODE)
    jobs[CONTROL] = lambda: hashlib.sha256(data).digest()
    results = {}
    for label, job in jobs.items():
        entry = results[label] = compare_threads(job, settings)
        log(
            f"  {label}: {entry['runs']} runs in {entry['1 thread s']:.2f} s on 1 thread (cores used: "
            f"{entry['user cores 1 thread']:.2f} user, {entry['kernel cores 1 thread']:.2f} kernel), "
            f"{entry['2 threads s']:.2f} s on 2 threads ({entry['user cores 2 threads']:.2f} user, "
            f"{entry['kernel cores 2 threads']:.2f} kernel) -> x{entry['speedup']:.2f}"
        )
    entry = results[PROCESSES] = compare_processes(_worker_run_wasm, settings)
    log(
        f"  {PROCESSES}: {entry['runs']} runs in {entry['1 process s']:.2f} s on 1 process, "
        f"{entry['2 processes s']:.2f} s on 2 processes -> x{entry['speedup']:.2f}"
    )
    return results


# -- e. memory per live sandbox ---------------------------------------------------------------


def private_mib() -> float:
    """This process's private memory (Private_Clean + Private_Dirty of /proc/self/smaps_rollup) in MiB.

    Unlike VmRSS it counts a page once: every instance maps the compiled image's linear-memory pages
    copy-on-write from the same .cwasm file, and VmRSS counts each such clean shared page once per
    instance that touched it (about 6-14 MiB per sandbox), though they are one page in the page cache.
    """
    fields = dict(line.split(":", 1) for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:])
    return sum(int(fields[name].split()[0]) for name in ("Private_Clean", "Private_Dirty")) / 1024


def peak_rss_during(action: Callable[[], Any]) -> tuple[float, float, Any]:
    """Runs `action` while sampling RSS and private memory every 20 ms; returns their peaks in MiB and the
    action's value."""
    samples = [(rss_mib(), private_mib())]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            samples.append((rss_mib(), private_mib()))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        value = action()
    finally:
        done.set()
        sampler.join()
    return max(rss for rss, _ in samples), max(private for _, private in samples), value


def bench_memory(runtime: Runtime, settings: Settings) -> dict[str, Any]:
    """RSS growth while K sandboxes sleep at once, per sandbox; and a bare CPython process for scale."""
    results: dict[str, Any] = {}
    count = settings.memory_sandboxes
    for label, limits in (("fuel+epoch", Limits()), ("epoch only", Limits(fuel=None))):
        sandbox = Sandbox(limits, runtime=runtime, max_concurrent_runs=count, spares=0)
        run_ok(sandbox, TRIVIAL_CODE)
        settle()
        time.sleep(0.2)
        before, private_before = rss_mib(), private_mib()
        with ThreadPoolExecutor(max_workers=count) as pool:
            peak, private_peak, outcomes = peak_rss_during(
                lambda pool=pool, sandbox=sandbox: list(pool.map(lambda _: run_ok(sandbox, SLEEP_CODE), range(count)))
            )
        assert all(outcome["data"] == "slept" for outcome in outcomes)
        settle()
        results[label] = {
            "sandboxes": count,
            "rss_before_mib": before,
            "rss_peak_mib": peak,
            "mib_per_sandbox": (peak - before) / count,
            "private_mib_per_sandbox": (private_peak - private_before) / count,
        }
        log(
            f"  {label}: RSS {before:.0f} -> {peak:.0f} MiB with {count} sleeping sandboxes "
            f"= {(peak - before) / count:.1f} MiB each; private memory "
            f"{(private_peak - private_before) / count:.1f} MiB each (shared image pages counted once)"
        )
    status = subprocess.run(
        [PYTHON, "-c", "print(open('/proc/self/status').read())"], capture_output=True, text=True, check=True
    ).stdout
    results["bare CPython process rss_mib"] = int(status.split("VmRSS:")[1].split()[0]) / 1024
    return results


# -- f. first-ever start ----------------------------------------------------------------------


def bench_first_build() -> dict[str, Any]:
    """`wasmexec build --cache-dir <empty dir>`: componentize-py build plus compiling both engines."""
    with tempfile.TemporaryDirectory(prefix="wasmexec-bench-") as directory:
        seconds, completed = timed(
            lambda: subprocess.run(
                [WASMEXEC_CLI, "build", "--cache-dir", directory], capture_output=True, text=True, timeout=900
            )
        )
    if completed.returncode != 0:
        return {"error": completed.stderr.strip()[-2000:]}
    steps = re.findall(r"wasmexec: (built|compiled) .*?in ([\d.]+) s", completed.stderr)
    result = {"total_s": seconds, "steps_s": [(step, float(value)) for step, value in steps]}
    log(f"  wasmexec build: {seconds:.1f} s ({', '.join(f'{step} {value} s' for step, value in steps)})")
    return result


# -- the report -------------------------------------------------------------------------------


def verdict(value: float | None, target: float, at_least: bool = False) -> str:
    """'met' or 'MISSED' against a target (an upper bound unless `at_least`)."""
    if value is None:
        return "-"
    return "met" if (value >= target if at_least else value <= target) else "MISSED"


def print_summary(results: dict[str, Any]) -> None:
    """The headline numbers against their targets, and the comparisons, as Markdown tables."""
    rows: list[tuple[str, str, str, str]] = []
    fresh = results["fresh_sandbox"]
    for label in ("fuel+epoch", "epoch only"):
        wall = fresh[label]["run_sync"]
        rows.append(
            (
                f"fresh sandbox `1 + 1`, {label}, p50",
                fmt(wall["median_ms"], 2, " ms"),
                "<= 1 ms",
                verdict(wall["median_ms"], 1),
            )
        )
        rows.append(
            (
                f"fresh sandbox `1 + 1`, {label}, p95",
                fmt(wall["p95_ms"], 2, " ms"),
                "<= 3 ms",
                verdict(wall["p95_ms"], 3),
            )
        )
    cold = results["cold_start"]["wasmexec run"]["median_ms"]
    rows.append(("cold start `wasmexec run -c`, p50", fmt(cold, 0, " ms"), "<= 150 ms", verdict(cold, 150)))
    for label, entry in results["parallel"].items():
        diagnostic = label in (CONTROL, PROCESSES)
        target = ("-", "-") if diagnostic else (">= 1.8x", verdict(entry["speedup"], 1.8, at_least=True))
        name = label if label.startswith("control") else f"fib(22) runs, {label}"
        rows.append((f"parallel 2 vs 1 thread: {name}", fmt(entry["speedup"], 2, "x"), *target))
    for label, entry in results["memory"].items():
        if isinstance(entry, dict):
            rows.append(
                (
                    f"RSS per sleeping sandbox, {label}",
                    fmt(entry["mib_per_sandbox"], 1, " MiB"),
                    "<= 20 MiB",
                    verdict(entry["mib_per_sandbox"], 20),
                )
            )
            if "private_mib_per_sandbox" in entry:  # older result files lack it
                private = entry["private_mib_per_sandbox"]
                rows.append((f"private memory per sleeping sandbox, {label}", fmt(private, 1, " MiB"), "<= 5 MiB",
                             verdict(private, 5)))  # fmt: skip
    if "first_build" in results and "total_s" in results["first_build"]:
        rows.append(("first-ever start (`wasmexec build`)", fmt(results["first_build"]["total_s"], 1, " s"), "-", "-"))
    log("\n| measure | median | target | |\n|---|---|---|---|")
    for row in rows:
        log("| " + " | ".join(row) + " |")
    log("\n| fresh start of an interpreter | p50 | x fresh sandbox |\n|---|---|---|")
    sandbox_ms = fresh["fuel+epoch"]["run_sync"]["median_ms"]
    starts = [
        ("wasmexec: fresh sandbox, run `1 + 1` (in process)", sandbox_ms),
        ("wasmexec: `wasmexec run` process (warm cache)", results["cold_start"]["wasmexec run"]["median_ms"]),
        ("native CPython: `python -c pass` process", results["cold_start"]["python -c pass"]["median_ms"]),
    ]
    load = results["workloads"]["pyodide"].get("load")
    if load is not None:
        starts.append(("Pyodide: `loadPyodide()` (in process)", load["median_ms"]))
    for name, ms in starts:
        log(f"| {name} | {ms:.1f} ms | x{fmt(ratio(ms, sandbox_ms), 1)} |")
    log(
        "\n| workload | mode | inside ms (p50) | x native | x Pyodide | inside ms (min) | x native (min) "
        "| host wall ms (p50) | x native |\n|---|---|---|---|---|---|---|---|---|"
    )
    for name, modes in results["workloads"]["workloads"].items():
        native_min = modes["native"]["inside"]["min_ms"]
        pyodide = modes.get("pyodide", {}).get("inside", {}).get("median_ms")
        for mode, entry in modes.items():
            inside, wall = entry["inside"], entry["wall"]
            log(
                f"| {name} | {mode} | {inside['median_ms']:.1f} | {fmt(entry['inside_ratio'], 2)} | "
                f"{fmt(ratio(inside['median_ms'], pyodide), 2)} | "
                f"{inside['min_ms']:.1f} | {fmt(ratio(inside['min_ms'], native_min), 2)} | "
                f"{wall['median_ms']:.1f} | {fmt(entry['wall_ratio'], 2)} |"
            )
    log(
        "\n| workload | fuel cost (from medians) | epoch cost (from medians) | fuel cost (from minimums) "
        "| epoch cost (from minimums) |\n|---|---|---|---|---|"
    )
    for name, cost in results["overheads"].items():
        log(
            f"| {name} | "
            + " | ".join(
                fmt(cost[key], 0, "%")
                for key in ("fuel_pct_median", "epoch_pct_median", "fuel_pct_min", "epoch_pct_min")
            )
            + " |"
        )
    log(
        f"\ntotal {results['total_s']:.0f} s; load average at start {results['machine']['loadavg_at_start']}, "
        f"at end {results['loadavg_at_end']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, no first-build timing (< 1 min)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every number to this JSON file")
    parser.add_argument("--summary-from", type=Path, metavar="JSON", help="only print the tables of an earlier --json")
    args = parser.parse_args(argv)
    if args.summary_from:
        print_summary(json.loads(args.summary_from.read_text()))
        return 0
    settings = Settings.for_mode(args.quick)
    started = time.perf_counter()

    runtime = Runtime()
    warm_up, _ = timed(lambda: (runtime.guest(True), runtime.guest(False)))
    results: dict[str, Any] = {
        "settings": settings.__dict__,
        "machine": machine_info(runtime),
        "runtime_prepare_s": warm_up,
    }
    log(f"machine: {results['machine']}  (runtime ready in {warm_up:.2f} s)")
    sections: list[tuple[str, str, Callable[[], Any]]] = [
        ("fresh_sandbox", "a. fresh sandbox per run", lambda: bench_fresh_sandbox(runtime, settings)),
        ("cold_start", "b. process cold start (warm cache)", lambda: bench_cold_start(settings)),
        ("parallel", "d. parallel throughput", lambda: bench_parallel(runtime, settings)),
        ("memory", "e. memory per live sandbox", lambda: bench_memory(runtime, settings)),
        ("workloads", "c. workloads", lambda: bench_workloads(runtime, settings)),  # last: leaves a big heap
    ]
    if not settings.quick:
        sections.append(("first_build", "f. first-ever start", bench_first_build))
    for key, title, section in sections:
        log(f"\n{title}")
        seconds, results[key] = timed(section)
        log(f"  ({seconds:.1f} s)")
    results["overheads"] = overheads(results["workloads"]["workloads"])
    results["total_s"] = time.perf_counter() - started
    results["loadavg_at_end"] = os.getloadavg()
    print_summary(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
