"""asyncio inside the sandbox: top-level await, asyncio.run, gather, sleep; time.sleep."""

from __future__ import annotations

from tests.helpers import data_of, error_of, limit_of
from wasmexec import Limits, Sandbox


def test_top_level_await_works(sandbox: Sandbox) -> None:
    assert data_of(sandbox.run_sync("import asyncio\nawait asyncio.sleep(0)\nresult = 'awaited'")) == "awaited"


def test_a_final_awaited_expression_is_the_data(sandbox: Sandbox) -> None:
    code = "import asyncio\nasync def f():\n    return 41\nawait f() + 1"
    assert data_of(sandbox.run_sync(code)) == 42


def test_asyncio_run_works(sandbox: Sandbox) -> None:
    code = (
        "import asyncio\nasync def main():\n    await asyncio.sleep(0.01)\n    return 'ran'\n"
        "result = asyncio.run(main())"
    )
    assert data_of(sandbox.run_sync(code)) == "ran"


def test_gathered_sleeps_run_concurrently(sandbox: Sandbox) -> None:
    code = """
import asyncio, time
async def nap(i):
    await asyncio.sleep(0.3)
    return i
start = time.monotonic()
values = await asyncio.gather(*(nap(i) for i in range(4)))
result = {"values": values, "elapsed": time.monotonic() - start}
"""
    data = data_of(sandbox.run_sync(code))
    assert data["values"] == [0, 1, 2, 3]
    assert 0.29 <= data["elapsed"] < 1.2  # four 0.3 s sleeps overlapped


def test_time_sleep_sleeps_and_counts_against_the_deadline(sandbox: Sandbox) -> None:
    code = "import time\nt = time.monotonic()\ntime.sleep(0.2)\nresult = time.monotonic() - t"
    data = data_of(sandbox.run_sync(code))
    assert data >= 0.19
    assert limit_of(sandbox.run_sync("import time\ntime.sleep(60)", Limits(timeout_ms=300))) == "timeout"


def test_time_sleep_rejects_bad_arguments_like_cpython(sandbox: Sandbox) -> None:
    assert error_of(sandbox.run_sync("import time\ntime.sleep(-1)"))["type"] == "ValueError"
    assert error_of(sandbox.run_sync("import time\ntime.sleep('1')"))["type"] == "TypeError"


def test_waiting_on_something_that_can_never_happen_fails_fast(sandbox: Sandbox) -> None:
    result = sandbox.run_sync("import asyncio\nawait asyncio.Event().wait()")
    error = error_of(result)
    assert error["type"] == "RuntimeError" and "deadlock" in error["message"]


def test_asyncio_wait_for_times_out_inside_the_run(sandbox: Sandbox) -> None:
    code = """
import asyncio
try:
    await asyncio.wait_for(asyncio.sleep(5), timeout=0.05)
except TimeoutError:
    result = "timed out"
"""
    assert data_of(sandbox.run_sync(code)) == "timed out"
