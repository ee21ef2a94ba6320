"""Warm spares: a run that takes one sees what a fresh instance would show it, and nothing of another run."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import data_of
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._sandbox.guest import ComponentGuest
from wasmexec._sandbox.instance import LiveInstance
from wasmexec._sandbox.output import OutputCapture
from wasmexec._sandbox.spares import SpareKey, Spares, SpareStats
from wasmexec._workspace.rundir_pool import default_pool

#: With a fuel budget (fuel is off by default): the spares here are metered, so fuel is tested to count from
#: the run's start, not the spare's warm-up.
LIMITS = Limits(timeout_ms=10_000, fuel=4_000_000_000_000)

#: What a run can see of the interpreter it starts in (everything a spare's warm-up could have changed).
PROBE = textwrap.dedent("""
    import sys, gc, linecache, builtins, warnings, threading, os
    leftovers = [o for o in gc.get_objects() if isinstance(o, dict) and "values" in o and "__builtins__" in o]
    result = {
        "modules": sorted(sys.modules),
        "linecache": sorted(linecache.cache),
        "builtins": sorted(dir(builtins)),
        "warnings": [repr(f) for f in warnings.filters],
        "threads": threading.active_count(),
        "exc": repr(sys.exc_info()),
        "last_exc": repr(getattr(sys, "last_exc", None)),
        "recursion": sys.getrecursionlimit(),
        "frozen": gc.get_freeze_count(),
        "cwd": os.getcwd(),
        "main": sorted(vars(sys.modules["__main__"])),
        "dummy_namespaces": len(leftovers),
        "path": sys.path,
        "meta_path": [type(finder).__name__ for finder in sys.meta_path],
        "dont_write_bytecode": sys.dont_write_bytecode,
    }
""")


def _key(sandbox: Sandbox, files: bool) -> SpareKey:
    limits = sandbox.limits
    return SpareKey(limits.fuel is not None, limits.memory_bytes, files, sandbox.skills if files else None)


def _ready(sandbox: Sandbox, files: bool = True) -> Sandbox:
    sandbox.spares.fill(_key(sandbox, files))
    assert sandbox.spares.wait_ready(_key(sandbox, files), 30), sandbox.spares.stats()
    return sandbox


@pytest.fixture
def spared(runtime: Runtime) -> Any:
    sandbox = Sandbox(LIMITS, runtime=runtime, spares=1)
    yield sandbox
    sandbox.close()


@pytest.mark.parametrize("files", [True, False])
def test_a_run_on_a_spare_sees_what_a_fresh_instance_shows(runtime: Runtime, files: bool) -> None:
    fresh = Sandbox(LIMITS, runtime=runtime, spares=0, workspaces=files)
    spared = _ready(Sandbox(LIMITS, runtime=runtime, spares=1, workspaces=files), files)
    try:
        on_spare = data_of(spared.run_sync(PROBE))
        assert spared.spares.stats().hits == 1
        on_fresh = data_of(fresh.run_sync(PROBE))
    finally:
        spared.close()
    assert on_spare == on_fresh
    assert on_spare["dummy_namespaces"] == 0
    assert "<sandbox>" in on_spare["linecache"]  # the probe's own, not the warm-up's


def test_nothing_of_one_run_reaches_the_next_with_spares_on(spared: Sandbox) -> None:
    first = textwrap.dedent("""
        import json, sys
        json.MARK = "first run"
        sys.modules["planted"] = json
        builtins = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
        builtins["MARK"] = 1
        open("/workspace/left.txt", "w").write("first")
        open("/tmp/left.txt", "w").write("first")
        print("printed by the first run")
        SECRET = "first"
    """)
    second = textwrap.dedent("""
        import json, os, sys
        result = [hasattr(json, "MARK"), "planted" in sys.modules, "MARK" in dir(__builtins__),
                  os.listdir("/workspace"), os.listdir("/tmp"), "SECRET" in globals()]
    """)
    _ready(spared)
    assert spared.run_sync(first)["result"]["ok"]
    for _ in range(3):  # the spare made after the first run, and more
        _ready(spared)
        result = spared.run_sync(second)
        assert data_of(result) == [False, False, False, [], [], False]
        assert result["logs"] == []
    assert spared.spares.stats().hits == 4


def test_a_spare_runs_with_the_runs_inputs_and_returns_its_artifacts(spared: Sandbox) -> None:
    _ready(spared)
    code = "open('out.txt', 'w').write(open('data.csv').read().upper())\nprint('done')"
    result = spared.run_sync(code, files={"data.csv": "a,b\n"})
    assert result["result"]["ok"], result
    assert spared.spares.stats().hits == 1
    assert [artifact["path"] for artifact in result["artifacts"]] == ["out.txt"]
    assert spared.read_artifact(result, "out.txt") == b"A,B\n"
    assert [entry["message"] for entry in result["logs"]] == ["done"]


def test_the_workspace_quota_holds_on_a_spare(spared: Sandbox) -> None:
    _ready(spared)
    result = spared.run_sync("open('big', 'wb').write(b'x' * 3_000_000)", LIMITS.replace(workspace_mb=1))
    assert spared.spares.stats().hits == 1  # the workspace limits are the run's, not the kind of spare's
    assert result["diagnostics"][-1]["limit"] == "workspace_bytes"


def test_the_deadline_and_fuel_count_from_the_runs_start_not_the_spares(spared: Sandbox) -> None:
    _ready(spared)
    import time

    time.sleep(0.5)  # the spare waits longer than the run's whole deadline
    result = spared.run_sync("while True: pass", LIMITS.replace(timeout_ms=300))
    assert result["diagnostics"][-1]["limit"] == "timeout"
    assert result["duration_ms"] >= 300
    _ready(spared)
    result = spared.run_sync("while True: pass", Limits(timeout_ms=10_000, fuel=50_000_000))
    assert result["diagnostics"][-1]["limit"] == "fuel"
    assert result["result"]["metrics"]["fuel_used"] >= 50_000_000
    _ready(spared)
    result = spared.run_sync("result = sum(range(1000))")
    assert 0 < result["result"]["metrics"]["fuel_used"] < LIMITS.fuel  # type: ignore[operator]


#: Wasm instructions a run on a spare may take (the export call, counted by fuel), with about 5 % to spare:
#: 355 k and 854 k before the usual report was written directly and a trailing expression's assignment was
#: placed without `ast.fix_missing_locations` (a walk over the whole tree in Python).
SPARE_RUN_BUDGETS = [("result = 1 + 1", 335_000), ("x = 1\nx + 1", 730_000)]


@pytest.mark.parametrize(("code", "budget"), SPARE_RUN_BUDGETS)
def test_a_trivial_run_on_a_spare_stays_within_its_instruction_budget(spared: Sandbox, code: str, budget: int) -> None:
    _ready(spared)
    result = spared.run_sync(code)
    assert spared.spares.stats().hits == 1
    assert data_of(result) == 2
    assert result["result"]["metrics"]["fuel_used"] <= budget


def test_output_printed_before_the_run_is_bound_never_reaches_its_logs(runtime: Runtime) -> None:
    guest = runtime.guest(True)
    live = LiveInstance(guest, LIMITS.memory_bytes)
    try:
        assert live.warm()
        live.invoke("print('before the run')", "{}", 1 << 20)  # what a warm-up could print: dropped
        output = OutputCapture(1 << 20, 1 << 20, 0.0)
        live.start(LIMITS, output, lambda: None)
        report = live.invoke("print('the run')", "{}", 1 << 20)
    finally:
        live.close()
    assert report.ok
    assert [entry["message"] for entry in output.finish()] == ["the run"]


def test_runs_in_place_or_with_other_skills_use_fresh_instances(spared: Sandbox, tmp_path: Path) -> None:
    _ready(spared)
    (tmp_path / "skills").mkdir()
    assert data_of(spared.run_sync("result = 1", workspace=tmp_path)) == 1
    assert data_of(spared.run_sync("result = 2", skills=tmp_path / "skills")) == 2
    stats = spared.spares.stats()
    assert (stats.hits, stats.misses, stats.ready) == (0, 0, 1)


def test_a_spare_whose_warm_up_fails_is_discarded_and_the_run_still_runs(runtime: Runtime) -> None:
    class BrokenWarmUp(ComponentGuest):
        def warm(self, store: Any, instance: Any) -> bool:
            return False

    class Broken:
        sandbox_image = runtime.sandbox_image

        def guest(self, fuel: bool) -> ComponentGuest:
            real = runtime.guest(fuel)
            return BrokenWarmUp(real.engine, real.ticker, fuel, real.image, real.component, real.linker)

    spares = Spares(Broken(), 1, default_pool())
    key = SpareKey(True, LIMITS.memory_bytes, True)
    spares.fill(key)
    assert not spares.wait_ready(key, 30)
    stats = spares.stats()
    assert (stats.failed, stats.ready, spares.take(key)) == (1, 0, None)
    spares.close()


def test_spares_off_makes_none(runtime: Runtime) -> None:
    sandbox = Sandbox(LIMITS, runtime=runtime, spares=0)
    sandbox.prepare()
    assert data_of(sandbox.run_sync("result = 3")) == 3
    assert sandbox.spares.stats().ready == 0
    assert sandbox.spares.stats().misses == 0


def test_closing_the_sandbox_closes_its_spares(spared: Sandbox) -> None:
    _ready(spared)
    spared.close()
    assert spared.spares.stats().ready == 0


@pytest.mark.parametrize("count", [-1, 9])
def test_a_spare_count_out_of_range_is_refused(runtime: Runtime, count: int) -> None:
    with pytest.raises(ValueError, match="spares must be between 0 and 8"):
        Sandbox(runtime=runtime, spares=count)


@pytest.mark.parametrize("moment", ["ready", "being made", "sandbox dropped"])
def test_the_process_exits_cleanly_with_spares_alive(runtime: Runtime, moment: str) -> None:
    ready = "sandbox.spares.wait_ready(key, 30)"
    wait = {"ready": ready, "being made": "pass", "sandbox dropped": f"{ready}; sandbox.spares.fill(key); del sandbox"}
    script = textwrap.dedent(f"""
        import json
        from wasmexec import Sandbox, Runtime
        from wasmexec._sandbox.spares import SpareKey
        sandbox = Sandbox(runtime=Runtime({str(runtime.artifacts.directory)!r}), spares=2)
        sandbox.prepare()
        key = SpareKey(True, sandbox.limits.memory_bytes, True, None)
        print(json.dumps(sandbox.run_sync("result = 5")["result"]["data"]))
        {wait[moment]}
    """)
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""  # nothing finalized during the interpreter's teardown
    assert json.loads(completed.stdout) == 5


def test_prometheus_counts_spare_hits_and_misses(spared: Sandbox) -> None:
    from wasmexec._server.admission import Admission
    from wasmexec._server.metrics import RunMetrics

    metrics = RunMetrics(Admission(), spares=spared.spares.stats)
    spared.run_sync("result = 1")  # nothing ready yet: a miss
    _ready(spared)
    spared.run_sync("result = 2")
    _ready(spared)
    value = metrics.registry.get_sample_value
    assert value("wasmexec_spare_takes_total", {"outcome": "hit"}) == 1
    assert value("wasmexec_spare_takes_total", {"outcome": "miss"}) == 1
    assert value("wasmexec_spares_ready") == 1
    both = sum((spared.spares.stats(), spared.spares.stats()), SpareStats())  # a server with two profiles
    assert (both.hits, both.misses, both.ready) == (2, 2, 2)


def test_no_spare_is_made_while_other_runs_are_going(spared: Sandbox) -> None:
    key = _key(spared, True)
    spared.spares.refill(key, busy=True)
    assert not spared.spares.wait_ready(key, 5)  # none is coming
    assert spared.spares.stats().skipped == 1
    spared.spares.refill(key)
    assert spared.spares.wait_ready(key, 30)


class _Closes:
    """The threads Stores were closed on, and an event set by each close."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import threading

        self.threads: list[str] = []
        self.done = threading.Event()
        original = LiveInstance.close

        def close(live: LiveInstance) -> None:
            self.threads.append(threading.current_thread().name)
            original(live)
            self.done.set()

        monkeypatch.setattr(LiveInstance, "close", close)


def test_the_used_store_is_closed_off_the_runs_thread(spared: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    closes = _Closes(monkeypatch)
    _ready(spared)
    assert data_of(spared.run_sync("result = 4")) == 4
    assert closes.done.wait(30)
    assert closes.threads[0] == "wasmexec-spares"


@contextmanager
def _seconds_left(seconds: float) -> Iterator[Callable[[], float]]:
    """The seconds left until a deadline, for waits on a condition (never negative)."""
    import time

    deadline = time.monotonic() + seconds
    yield lambda: max(0.0, deadline - time.monotonic())


def test_runs_that_find_no_spare_ready_get_more_kept_up_to_the_ceiling(runtime: Runtime) -> None:
    key = SpareKey(True, LIMITS.memory_bytes, False)
    for ceiling, kept in ((2, 2), (1, 1)):
        spares = Spares(runtime, ceiling, default_pool())
        try:
            assert spares.take(key) is None  # the first run of a kind: none was ordered
            spares.refill(key)
            assert spares.take(key, busy=True) is None  # came before it was ready: keep one more
            spares.refill(key)
            with _seconds_left(30) as left, spares._lock:  # until none is being made
                while spares._pending.get(key) and spares._lock.wait(left()):
                    pass
            assert spares.stats().ready == kept
        finally:
            spares.close()


@pytest.mark.parametrize("core_free", [True, False])
def test_runs_faster_than_spares_order_one_at_take_with_a_free_core_and_skip_without(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, core_free: bool
) -> None:
    from wasmexec._sandbox import spares as spares_module

    monkeypatch.setattr(spares_module, "_core_free", lambda: core_free)
    key = SpareKey(True, LIMITS.memory_bytes, False)
    spares = Spares(runtime, 1, default_pool())
    try:
        spares.fill(key)
        assert spares.wait_ready(key, 30)
        spares._make_s = 60.0  # making a spare takes longer than any gap between these runs
        spares.refill(key)  # a run ended
        assert spares.take(key) is not None  # the next one came at once: a hit, and too fast
        if core_free:
            assert spares.wait_ready(key, 30)  # ordered at take: made while the run goes on
        else:
            assert spares.stats().ready == 0
            spares.refill(key)  # the run ended: no core free, so no spare either
            assert not spares.wait_ready(key, 5)
            assert spares.stats().skipped == 1
    finally:
        spares.close()


def test_what_a_held_run_orders_as_it_ends_waits_for_the_release(
    spared: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wasmexec._sandbox import spares as spares_module

    monkeypatch.setattr(spares_module, "MAX_HOLD_S", 60.0)  # only the release lets it go here
    closes = _Closes(monkeypatch)
    key = _key(spared, True)
    _ready(spared)
    hold = spares_module.Hold()
    with spares_module.holding(hold):
        assert data_of(spared.run_sync("result = 4")) == 4  # took the spare; ordered the next one and its close
    assert not closes.done.wait(1) and not spared.spares.wait_ready(key, 1)  # held: neither made nor closed
    assert data_of(spared.run_sync("result = 5")) == 5  # a run without a hold is not held up by another's
    hold.release()
    assert closes.done.wait(30) and spared.spares.wait_ready(key, 30)
    assert set(closes.threads) == {"wasmexec-spares"}


def test_a_held_runs_workspace_is_released_only_after_the_hold_and_on_the_spares_thread(
    spared: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from wasmexec._sandbox import spares as spares_module
    from wasmexec._workspace.rundir_pool import RunDirPool

    monkeypatch.setattr(spares_module, "MAX_HOLD_S", 60.0)
    released: list[str] = []
    done = threading.Event()
    release = RunDirPool.release

    def recorded(pool: RunDirPool, *args: Any, **kwargs: Any) -> None:
        released.append(threading.current_thread().name)
        release(pool, *args, **kwargs)
        done.set()

    monkeypatch.setattr(RunDirPool, "release", recorded)
    hold = spares_module.Hold()
    with spares_module.holding(hold):
        assert data_of(spared.run_sync("open('kept.txt', 'w').write('x')\nresult = 4")) == 4
    assert not done.wait(0.5) and released == []  # held: the run directory is still there
    hold.release()
    assert done.wait(30)
    assert released[0] == "wasmexec-spares"


def test_a_hold_never_released_lets_the_work_go_after_its_time(
    spared: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wasmexec._sandbox import spares as spares_module

    monkeypatch.setattr(spares_module, "MAX_HOLD_S", 0.2)
    key = _key(spared, True)
    _ready(spared)
    with spares_module.holding(spares_module.Hold()):  # a client that never reads its answer
        assert data_of(spared.run_sync("result = 4")) == 4
    assert spared.spares.wait_ready(key, 30)


def test_a_core_is_free_for_a_spare_only_while_this_process_leaves_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # Counted from this process's runs in progress, not from the load average: other processes' work
    # must not stop spares coming, and runs of this process filling the cores must.
    from wasmexec._sandbox import spares as spares_module

    monkeypatch.setattr(spares_module, "_CORES", 2)
    monkeypatch.setattr(spares_module.os, "getloadavg", lambda: (64.0, 64.0, 64.0), raising=False)
    assert spares_module._core_free()
    with spares_module.running():
        assert spares_module._core_free()  # one run on two cores: the spare has the other
        with spares_module.running():
            assert not spares_module._core_free()
        assert spares_module._core_free()
    assert spares_module._runs_in_progress == 0


def test_a_run_counts_as_in_progress_while_it_holds_a_slot(runtime: Runtime) -> None:
    from wasmexec._sandbox import spares as spares_module

    seen: list[int] = []
    with Sandbox(LIMITS, runtime=runtime, spares=0) as sandbox:
        sandbox.run_sync("print('x')", on_output=lambda level, text: seen.append(spares_module._runs_in_progress))
    assert seen and seen[0] >= 1
    assert spares_module._runs_in_progress == 0
