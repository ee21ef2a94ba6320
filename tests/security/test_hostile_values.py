"""Hostile exceptions and result values: the bridge reports them instead of crashing the interpreter."""

from __future__ import annotations

import pytest

from tests.helpers import data_of, diagnostic, error_of
from tests.security._support import assert_host_survives, run
from wasmexec import Runtime, Sandbox


def test_an_exception_with_a_huge_message_is_reported(sandbox: Sandbox) -> None:
    result = sandbox.run_sync("raise ValueError('x' * 1_000_000)")
    assert error_of(result)["type"] == "ValueError"


def test_raising_system_exit_or_keyboard_interrupt_is_reported_as_a_failure(sandbox: Sandbox) -> None:
    assert error_of(sandbox.run_sync("raise SystemExit(3)"))["type"] == "SystemExit"
    assert error_of(sandbox.run_sync("raise KeyboardInterrupt"))["type"] == "KeyboardInterrupt"
    assert error_of(sandbox.run_sync("raise GeneratorExit"))["type"] == "GeneratorExit"
    assert data_of(sandbox.run_sync("import sys\nresult = 'before'\nsys.exit(0)")) == "before"


def test_an_exception_raised_while_handling_another_is_reported(sandbox: Sandbox) -> None:
    code = "try:\n    1 / 0\nexcept ZeroDivisionError:\n    raise KeyError('second')"
    assert error_of(sandbox.run_sync(code))["type"] == "KeyError"


def test_a_result_whose_repr_never_ends_stops_at_the_timeout(runtime: Runtime) -> None:
    code = "class Slow:\n    def __repr__(self):\n        while True:\n            pass\nresult = Slow()"
    result = run(runtime, code, timeout_ms=500)
    assert diagnostic(result, "SANDBOX_LIMIT")["limit"] == "timeout"


def test_an_exception_whose_str_raises_is_reported_as_that_exception(runtime: Runtime) -> None:
    code = "class Weird(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\nraise Weird()"
    result = run(runtime, code)
    assert error_of(result)["type"] == "Weird", result
    assert_host_survives(runtime)


@pytest.mark.parametrize(
    "code",
    [
        "class R:\n    def __repr__(self):\n        raise ValueError('no repr')\nresult = R()",
        "class K:\n    def __str__(self):\n        raise ValueError('no str')\n    def __hash__(self):\n"
        "        return 1\nresult = {K(): 1}",
        "class O:\n    def __lt__(self, other):\n        raise ValueError('no order')\n    def __hash__(self):\n"
        "        return id(self)\nresult = {O(), O()}",
        "class L(list):\n    def __iter__(self):\n        raise ValueError('no iter')\nresult = L([1])",
    ],
    ids=["repr-raises", "key-str-raises", "set-order-raises", "list-iter-raises"],
)
def test_a_result_that_cannot_be_converted_is_reported_not_crashed_on(runtime: Runtime, code: str) -> None:
    result = run(runtime, code)
    assert not any(found["code"] == "SANDBOX_TRAP" for found in result["diagnostics"]), result
    if not result["result"]["ok"]:
        assert error_of(result)["type"] != "SandboxError", result
    assert_host_survives(runtime)
