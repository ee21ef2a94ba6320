"""The science profile's fresh-run latency, memory and native yardstick (issue 9).

Run with the science venv (``pip install -e ".[science]"``), after ``wasmexec build --profile science``::

    .venv-science/bin/python benchmarks/bench_science.py            # about 2 minutes
    .venv-science/bin/python benchmarks/bench_science.py --runs 10  # fewer samples

Measures, interleaved in one run (host wall time of `Sandbox.run_sync`, fuel+epoch, default limits):
a trivial run; a run that imports numpy and pandas and sums a small DataFrame (the issue's
≤ 20 ms p50 target); a 1M-row groupby; the same workloads in native CPython when numpy and
pandas are importable on the host (in-process, after one warm-up import: a yardstick, not a
sandbox); and the process's RSS growth per live science sandbox (8 runs held open at once by
threads that sleep in the guest). Prints the machine's load average with the numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

from wasmexec import Limits, Sandbox

WORKLOADS = {
    "trivial": "result = 1 + 1",
    "numpy+pandas": "import numpy as np, pandas as pd\nresult = int(pd.DataFrame({'a': np.arange(10)})['a'].sum())",
    "groupby 1M rows": (
        "import numpy as np, pandas as pd\n"
        "frame = pd.DataFrame({'key': np.arange(1_000_000) % 100, 'value': np.ones(1_000_000)})\n"
        "result = float(frame.groupby('key')['value'].sum().sum())"
    ),
}


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _native(code: str) -> float:
    namespace: dict[str, Any] = {}
    started = time.perf_counter()
    exec(code, namespace)
    return (time.perf_counter() - started) * 1000


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def _memory_per_sandbox(sandbox: Sandbox, count: int = 8) -> float:
    before = _rss_kib()
    peak = before
    threads = [threading.Thread(target=sandbox.run_sync, args=("import time\ntime.sleep(2)",)) for _ in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        peak = max(peak, _rss_kib())
        time.sleep(0.02)
    for thread in threads:
        thread.join()
    return (peak - before) / count / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cache-dir", help="where `wasmexec build --profile science --cache-dir` put the image")
    args = parser.parse_args()
    # No warm spares: fresh instances on the path (bench_spares.py measures runs that find a spare ready).
    sandbox = Sandbox(Limits(timeout_ms=60_000), cache_dir=args.cache_dir, profile="science", spares=0)
    started = time.perf_counter()
    sandbox.prepare()
    print(f"load average {os.getloadavg()}; deserialize + prepare {1000 * (time.perf_counter() - started):.0f} ms")
    try:
        import numpy  # noqa: F401
        import pandas  # noqa: F401

        native = True
    except ImportError:
        native = False
    samples: dict[str, list[float]] = {name: [] for name in WORKLOADS}
    native_samples: dict[str, list[float]] = {name: [] for name in WORKLOADS}
    for _ in range(args.runs):
        for name, code in WORKLOADS.items():
            begun = time.perf_counter()
            result = sandbox.run_sync(code)
            samples[name].append((time.perf_counter() - begun) * 1000)
            assert result["result"]["ok"], result
            if native:
                native_samples[name].append(_native(code))
    print(f"{'workload':<18} {'science p50':>12} {'p95':>8} {'native p50':>11} {'ratio':>7}")
    for name in WORKLOADS:
        p50, p95 = _percentiles(samples[name])
        if native:
            n50 = statistics.median(native_samples[name])
            print(f"{name:<18} {p50:>10.1f}ms {p95:>6.1f}ms {n50:>9.2f}ms {p50 / n50:>6.1f}x")
        else:
            print(f"{name:<18} {p50:>10.1f}ms {p95:>6.1f}ms {'(no numpy on the host)':>20}")
    print(f"memory per live science sandbox: {_memory_per_sandbox(sandbox):.1f} MiB")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
