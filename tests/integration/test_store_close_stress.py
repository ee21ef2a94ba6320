"""Stores closed off the run's thread (on the spares' thread) under stress: no crash, no lost run.

A segfault in a wasmtime thread was once blamed on such closes; it was the tests' tracemalloc
race (python/cpython#128679). This runs thousands of runs, trivial ones and ones that trap, time
out, run out of fuel or memory, from two threads at once, every Store closed on another thread,
in a process of its own (a crash is its exit status, not pytest's), in a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from wasmexec import Runtime

SCRIPT = textwrap.dedent("""
    import collections, json, sys, threading
    from wasmexec import Limits, Runtime, Sandbox

    runtime = Runtime(sys.argv[1])
    outcomes = collections.Counter()
    lock = threading.Lock()
    KINDS = [
        ("ok", "result = 1 + 1", Limits()),
        ("timeout", "while True: pass", Limits(timeout_ms=20)),
        ("fuel", "while True: pass", Limits(fuel=2_000_000)),
        ("memory", "x = bytearray(200 << 20)", Limits(memory_mb=64)),
        ("trap", "import select\\nselect.select([], [], [], 100)", Limits()),
    ]

    def worker(sandbox, seed):
        for i in range(int(sys.argv[2])):
            kind, code, limits = KINDS[0] if (i + seed) % 25 else KINDS[1 + (i // 25 + seed) % 4]
            result = sandbox.run_sync(code, limits)
            outcome = result["result"]
            found = "ok" if outcome["ok"] else next(
                (d.get("limit") or d["code"] for d in result["diagnostics"] if d["severity"] == "error"), "?")
            with lock:
                outcomes[f"{kind}:{found}"] += 1

    for workspaces in (False, True):
        with Sandbox(runtime=runtime, spares=2, workspaces=workspaces) as sandbox:
            threads = [threading.Thread(target=worker, args=(sandbox, seed)) for seed in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    print(json.dumps(outcomes))
""")


def test_thousands_of_runs_with_stores_closed_on_another_thread_neither_crash_nor_misreport(runtime: Runtime) -> None:
    per_thread = 500  # two threads, two sandboxes: 2,000 runs, 80 of them limits and traps
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(runtime.artifacts.directory), str(per_thread)],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stderr == ""
    outcomes = json.loads(completed.stdout)
    assert sum(outcomes.values()) == 4 * per_thread
    expected = {"ok:ok", "timeout:timeout", "fuel:fuel", "memory:memory", "trap:BLOCKING_WAIT"}
    assert set(outcomes) == expected, outcomes  # every run reported as what it was
