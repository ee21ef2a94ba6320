"""The Python API: async and sync use, parallel runs, cancellation, isolation between runs."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import anyio
import pytest

from tests.helpers import data_of, limit_of
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._runctx.toolhost import NoTools


def test_the_sync_context_manager_runs_code(runtime: Runtime) -> None:
    with Sandbox(runtime=runtime) as sandbox:
        assert data_of(sandbox.run_sync("result = 'sync'")) == "sync"
    with pytest.raises(RuntimeError, match="closed"):
        sandbox.run_sync("1")


def test_a_run_can_override_the_sandbox_limits(runtime: Runtime) -> None:
    sandbox = Sandbox(Limits(timeout_ms=10_000), runtime=runtime)
    assert limit_of(sandbox.run_sync("while True: pass", Limits(timeout_ms=200))) == "timeout"


def test_bad_arguments_are_type_errors(runtime: Runtime) -> None:
    sandbox = Sandbox(runtime=runtime)
    with pytest.raises(TypeError, match="code must be a str"):
        sandbox.run_sync(b"1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limits must be a Limits"):
        sandbox.run_sync("1", {"timeout_ms": 5})  # type: ignore[arg-type]


def test_async_runs_execute_in_parallel_and_the_event_loop_stays_responsive(runtime: Runtime) -> None:
    async def main() -> tuple[list[object], int]:
        ticks = 0
        results: list[object] = []

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await anyio.sleep(0.01)
                ticks += 1

        async with Sandbox(runtime=runtime) as sandbox:

            async def one(i: int) -> None:
                results.append(data_of(await sandbox.run(f"import time\ntime.sleep(0.4)\nresult = {i}")))

            async with anyio.create_task_group() as group:
                group.start_soon(ticker)
                async with anyio.create_task_group() as runs:
                    for i in range(4):
                        runs.start_soon(one, i)
                group.cancel_scope.cancel()
        return results, ticks

    started = time.monotonic()
    results, ticks = anyio.run(main)
    elapsed = time.monotonic() - started
    assert sorted(results) == [0, 1, 2, 3]
    assert elapsed < 1.5  # four 0.4 s runs overlapped instead of taking 1.6 s
    assert ticks >= 10  # the loop kept running while wasm ran on worker threads


def test_an_async_run_goes_straight_to_a_guest_thread_and_its_exceptions_reach_the_task(runtime: Runtime) -> None:
    # No worker thread between the loop and the guest thread (each hand-off is a wake-up).
    threads: list[str] = []

    class Watched(Sandbox):
        def _execute(self, *args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return super()._execute(*args, **kwargs)

    async def main() -> object:
        async with Watched(runtime=runtime) as sandbox:
            result = await sandbox.run("result = 3")
            with pytest.raises(TypeError, match="files must be a mapping"):
                await sandbox.run("1", files=["not", "a", "mapping"])  # type: ignore[arg-type]
            return data_of(result)

    assert anyio.run(main) == 3
    assert threads == ["wasmexec-guest"]


def test_cpu_bound_runs_on_two_threads_overlap(runtime: Runtime) -> None:
    sandbox = Sandbox(runtime=runtime)
    results: list[object] = []
    code = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\nresult = fib(20)"
    threads = [threading.Thread(target=lambda: results.append(data_of(sandbox.run_sync(code)))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [6765, 6765]


@pytest.mark.parametrize("code", ["while True: pass", "import time\ntime.sleep(50)"], ids=["busy", "sleeping"])
def test_cancelling_the_awaiting_task_stops_the_run_promptly(runtime: Runtime, code: str) -> None:
    async def main() -> float:
        async with Sandbox(Limits(timeout_ms=60_000), runtime=runtime) as sandbox:
            started = time.monotonic()
            with anyio.move_on_after(0.3):
                await sandbox.run(code)
            return time.monotonic() - started

    assert anyio.run(main) < 5  # not the 60 s timeout


def test_runs_share_nothing(runtime: Runtime) -> None:
    sandbox = Sandbox(runtime=runtime)
    data_of(sandbox.run_sync("import builtins, sys, json\nbuiltins.leak = 1\nsys.modules['json'] = None\nGLOBAL = 2"))
    seen = data_of(
        sandbox.run_sync(
            "import builtins, sys\nresult = [hasattr(builtins, 'leak'), sys.modules.get('json') is None, "
            "'GLOBAL' in globals()]"
        )
    )
    assert seen == [False, False, False]


def test_max_concurrent_runs_queues_sync_runs_too(runtime: Runtime) -> None:
    sandbox = Sandbox(runtime=runtime, max_concurrent_runs=1)
    code = "import time\nt = time.monotonic()\ntime.sleep(0.3)\nresult = t"
    starts: list[float] = []
    threads = [threading.Thread(target=lambda: starts.append(data_of(sandbox.run_sync(code)))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(starts) == 2 and abs(starts[0] - starts[1]) >= 0.29  # the second waited for the first


class _HandlerSpy(NoTools):
    """Notes the SIGINT handler in force while the sandboxed code runs (asked through discovery)."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    def catalog(self, run: Any, op: str, request: Any) -> Any:
        self.seen.append(signal.getsignal(signal.SIGINT))
        return super().catalog(run, op, request)


def _custom_handler(signum: int, frame: object) -> None:
    """A handler someone else installed (the CLI installs one that stops its run)."""


@pytest.mark.parametrize("installed", [signal.default_int_handler, _custom_handler], ids=["default", "custom"])
def test_run_sync_swaps_only_the_default_sigint_handler_and_restores_it(runtime: Runtime, installed: Any) -> None:
    spy = _HandlerSpy()
    previous = signal.signal(signal.SIGINT, installed)
    try:
        code = "from codemode import discovery\nresult = discovery.list_servers()"
        assert data_of(Sandbox(runtime=runtime, tools=spy).run_sync(code)) == []
        assert signal.getsignal(signal.SIGINT) is installed
    finally:
        signal.signal(signal.SIGINT, previous)
    (during,) = spy.seen
    if installed is _custom_handler:
        assert during is _custom_handler
    else:
        assert during is not signal.default_int_handler and callable(during)


def test_run_sync_off_the_main_thread_leaves_signals_alone(runtime: Runtime) -> None:
    spy = _HandlerSpy()
    code = "from codemode import discovery\nresult = discovery.list_servers()"
    worker = threading.Thread(target=lambda: Sandbox(runtime=runtime, tools=spy).run_sync(code))
    worker.start()
    worker.join(timeout=60)
    assert spy.seen == [signal.getsignal(signal.SIGINT)]
