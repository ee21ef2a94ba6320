"""State leaks and tampering: every run starts from the pristine snapshot, whatever the last one did."""

from __future__ import annotations

import builtins
import sys
import time

import pytest

from tests.helpers import data_of, diagnostic, log_text
from tests.security._support import assert_host_survives, run
from wasmexec import Limits, Runtime, Sandbox, validate_run_result
from wasmexec._sandbox.spares import SpareKey

TAMPER = """
import builtins, sys, time, random, json, os
import codemode, codemode._host, codemode.errors
builtins.x = 'leaked'
builtins.print = lambda *args, **kwargs: None
sys.modules['json'] = None
codemode.errors = None
codemode._host.sleep = None
codemode._host.wait = None
time.sleep = lambda seconds: None
random.seed(1234)
sys.meta_path.clear()
sys.path.clear()
sys.setrecursionlimit(50)
os.environ['LEAK'] = '1'
global_from_run_one = 'leaked'
result = 'tampered'
"""

CHECK = """
import builtins, sys, time, os
import json
import codemode, codemode._host, codemode.errors
result = {
    'builtin': hasattr(builtins, 'x'),
    'global': 'global_from_run_one' in globals(),
    'json': json.dumps([1]),
    'errors': codemode.errors.__name__,
    'host_sleep': callable(codemode._host.sleep) and callable(codemode._host.wait),
    'sleep_module': time.sleep.__module__,
    'meta_path': len(sys.meta_path) > 0,
    'path': len(sys.path) > 0,
    'recursion': sys.getrecursionlimit() > 50,
    'env': dict(os.environ),
}
print('printing works')
"""


def test_tampering_in_one_run_is_invisible_to_the_next(sandbox: Sandbox, runtime: Runtime) -> None:
    assert data_of(sandbox.run_sync(TAMPER)) == "tampered"
    result = sandbox.run_sync(CHECK)
    assert data_of(result) == {
        "builtin": False,
        "global": False,
        "json": "[1]",
        "errors": "codemode.errors",
        "host_sleep": True,
        "sleep_module": "codemode._host",
        "meta_path": True,
        "path": True,
        "recursion": True,
        "env": {},
    }
    assert log_text(result) == "printing works"
    assert_host_survives(runtime)


def test_tampering_does_not_leak_into_a_run_with_other_limits(runtime: Runtime) -> None:
    data_of(run(runtime, TAMPER, fuel=None))
    data_of(run(runtime, TAMPER))
    assert data_of(run(runtime, CHECK, fuel=None))["builtin"] is False
    assert data_of(run(runtime, CHECK))["builtin"] is False


def test_replacing_the_bridge_functions_in_a_run_does_not_affect_the_host_or_later_runs(
    sandbox: Sandbox, runtime: Runtime
) -> None:
    code = (
        "import sys, io\n"
        "from codemode import _runner, _jsonable, _restrict, _loop\n"
        "_runner.run_to_json = lambda *args: 'garbage'\n"
        "_runner._Run.execute = lambda self: {'ok': True, 'data_json': '\"forged\"'}\n"
        "_jsonable.to_jsonable = None\n"
        "_restrict.HINTS.clear()\n"
        "_loop.SandboxEventLoop = None\n"
        "sys.stdout = io.StringIO()\n"
        "result = 'done'\n"
    )
    first = sandbox.run_sync(code)
    validate_run_result(first)  # whatever this run reports about itself (here a crash of its own bridge)
    second = sandbox.run_sync("import socket\nsocket.create_connection(('127.0.0.1', 80))")
    assert "network" in diagnostic(second, "UNCAUGHT_EXCEPTION")["hint"]  # the hints are back
    third = sandbox.run_sync("import asyncio\nawait asyncio.sleep(0)\nprint('async ok')\nresult = 42")
    assert data_of(third) == 42
    assert log_text(third) == "async ok"
    assert_host_survives(runtime)


def test_the_host_process_is_untouched_by_guest_tampering(sandbox: Sandbox) -> None:
    before_modules = set(sys.modules)
    before_sleep = time.sleep
    data_of(sandbox.run_sync(TAMPER))
    assert time.sleep is before_sleep
    assert "json" in sys.modules and sys.modules["json"] is not None
    assert not hasattr(builtins, "x")
    assert set(sys.modules) >= before_modules


def test_random_numbers_differ_between_runs(sandbox: Sandbox) -> None:
    code = "import random, uuid\n[random.random(), random.getrandbits(64), str(uuid.uuid4())]"
    first, second = data_of(sandbox.run_sync(code)), data_of(sandbox.run_sync(code))
    assert first[0] != second[0]
    assert first[1] != second[1]
    assert first[2] != second[2]


@pytest.mark.parametrize("spares", [0, 1])
def test_each_instance_draws_its_own_random_numbers_fresh_or_spare(runtime: Runtime, spares: int) -> None:
    # The snapshot holds one generator state: whoever reseeds it (the runner, or componentize-py on an
    # instance's first export call, before a spare's warm-up), no two instances may replay it.
    seen = []
    with Sandbox(Limits(timeout_ms=10_000), runtime=runtime, spares=spares, workspaces=False) as sandbox:
        key = SpareKey(sandbox.limits.fuel is not None, sandbox.limits.memory_bytes, False, None)
        for _ in range(3):
            if spares:  # ordered here: a refill may be skipped when runs come faster than spares are made
                sandbox.spares.fill(key)
                assert sandbox.spares.wait_ready(key, 30), sandbox.spares.stats()
            seen.append(tuple(data_of(sandbox.run_sync("import random\n[random.random(), random.getrandbits(64)]"))))
        assert sandbox.spares.stats().hits == 3 * spares  # with spares, every run took a warmed-up one
    assert len(set(seen)) == 3, seen


def test_a_seed_set_in_one_run_does_not_fix_the_next_runs_numbers(sandbox: Sandbox) -> None:
    seeded = data_of(sandbox.run_sync("import random\nrandom.seed(1234)\nrandom.random()"))
    following = data_of(sandbox.run_sync("import random\nrandom.random()"))
    assert following != seeded


def test_objects_created_in_one_run_cannot_be_found_by_the_next(sandbox: Sandbox) -> None:
    marker = "wasmexec-isolation-marker-7d1e"
    data_of(sandbox.run_sync(f"import sys\nsys.keep = [{marker!r}]\nclass Leaky:\n    pass\nsys.leaky = Leaky"))
    code = (
        "import gc, sys\n"
        f"found = [o for o in gc.get_objects() if isinstance(o, list) and {marker!r} in o"
        " and o is not __builtins__]\n"
        "result = [hasattr(sys, 'keep'), hasattr(sys, 'leaky'), len(found)]"
    )
    # The check's own code contains the marker once (as a constant), never inside a list.
    assert data_of(sandbox.run_sync(code)) == [False, False, 0]
