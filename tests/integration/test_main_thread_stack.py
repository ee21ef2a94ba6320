"""The main thread runs guest calls on its own stack only when that stack can grow far enough.

Each case is a fresh process started with chosen stack limits (`resource.setrlimit` before exec), so
the main thread's stack mapping and rlimit are what a user's process would have.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from wasmexec._sandbox.stack import THREAD_STACK_BYTES

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, resource, threading
from wasmexec._sandbox import stack
here = stack.on_guest_stack(threading.get_ident) == threading.get_ident()
print(json.dumps({"in_place": here, "soft": resource.getrlimit(resource.RLIMIT_STACK)[0]}))
"""

#: A guest recursion that goes the whole wasm stack deep (64 MiB), run from the main thread.
_DEEP = """
import json, resource
from wasmexec import Sandbox
code = "import sys\\nsys.setrecursionlimit(10 ** 6)\\ndef f(n):\\n    return f(n + 1)\\nf(0)"
with Sandbox(spares=0) as sandbox:
    outcome = sandbox.run_sync(code)["result"]
    again = sandbox.run_sync("result = 6 * 7")["result"]
print(json.dumps({"error": outcome["error"], "again": again["data"],
                  "soft": resource.getrlimit(resource.RLIMIT_STACK)[0]}))
"""


def _in_process(script: str, soft: int, hard: int) -> dict[str, object]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          preexec_fn=limit, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    parsed: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def test_the_soft_limit_is_raised_so_the_main_thread_runs_calls_itself() -> None:
    probe = _in_process(_PROBE, 8 << 20, resource.RLIM_INFINITY)
    assert probe["in_place"] is True
    assert isinstance(probe["soft"], int) and probe["soft"] >= THREAD_STACK_BYTES


def test_a_hard_limit_too_small_hands_calls_to_a_guest_thread() -> None:
    probe = _in_process(_PROBE, 8 << 20, 8 << 20)
    assert probe == {"in_place": False, "soft": 8 << 20}


def test_a_guest_recursion_the_whole_wasm_stack_deep_on_the_main_thread_stops_cleanly() -> None:
    # Started with an 8 MiB soft limit: the wasm stack (64 MiB) only fits because the limit was raised,
    # and a process that crashed (a fault past the stack) would fail the return-code check.
    outcome = _in_process(_DEEP, 8 << 20, resource.RLIM_INFINITY)
    error = outcome["error"]
    assert isinstance(error, dict)
    assert error["type"] in {"RecursionError", "SandboxLimitError"}, error
    assert outcome["again"] == 42
    assert isinstance(outcome["soft"], int) and outcome["soft"] >= THREAD_STACK_BYTES
