"""The raw `start-sample` host function (the component's import, the science door's operation) is
untrusted input with a budget, like every host function.

The calls below bypass `codemode.llm` (as an attacker would) and must be refused by size or
range before the host decodes, redacts or sends anything, without the host allocating much
more than the guest sent, and a run looping past the call cap must not grow the trace.
"""

from __future__ import annotations

from typing import Any

from tests.helpers import data_of, python_allocations
from tests.security._support import RAW_HOST, profile_of
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._runctx.llm_ask import MAX_SYSTEM_BYTES

RAW = (
    RAW_HOST
    + """
{setup}
try:
    result = ["ok", {call}]
except Err as err:
    result = ["err", err.value.kind.name, err.value.message[:300]]
"""
)


class Model:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> str:
        self.requests.append(request)
        return "a"


def test_an_80_mb_prompt_is_dropped_unread_and_refused(runtime: Runtime) -> None:
    code = RAW.format(setup="prompt = 'x' * 80_000_000", call="host.start_sample(prompt, '', 5)")
    sandbox, model = Sandbox(Limits(timeout_ms=15_000, memory_mb=512), runtime=runtime), Model()
    with python_allocations() as allocated:
        result = sandbox.run_sync(code, sampler=model)
        peak = allocated()
    outcome = data_of(result)
    # The science door reads only the head of a request over its bound: it names the request's size.
    expected = "the prompt is 800000" if profile_of(runtime) == "science" else "the prompt is 80000000 bytes"
    assert outcome[:2] == ["err", "LIMIT_EXCEEDED"] and expected in outcome[2], outcome
    assert model.requests == [] and peak < 10_000_000, peak  # never lifted into Python


def test_an_oversized_system_prompt_and_a_zero_max_tokens_are_refused(runtime: Runtime) -> None:
    sandbox, model = Sandbox(Limits(timeout_ms=15_000), runtime=runtime), Model()
    system = RAW.format(setup=f"system = 's' * {MAX_SYSTEM_BYTES + 1}", call="host.start_sample('p', system, 5)")
    zero = RAW.format(setup="", call="host.start_sample('p', '', 0)")
    assert data_of(sandbox.run_sync(system, sampler=model))[:2] == ["err", "LIMIT_EXCEEDED"]
    assert data_of(sandbox.run_sync(zero, sampler=model))[:2] == ["err", "INVALID_ARGUMENT"]
    assert model.requests == []


def test_a_loop_past_the_call_cap_leaves_one_refused_entry(runtime: Runtime) -> None:
    code = (
        RAW_HOST
        + """
refused = 0
for _ in range(10_000):
    try:
        host.start_sample('p', '', 1)
    except Err:
        refused += 1
result = refused
"""
    )
    sandbox, model = Sandbox(Limits(timeout_ms=15_000, max_llm_calls=2), runtime=runtime), Model()
    result = sandbox.run_sync(code, sampler=model)
    assert data_of(result) == 9_998
    _, _, refused = result["tool_trace"]  # the two within the cap, and one refusal for the whole loop
    assert refused["error"].startswith("limit-exceeded: this run may make at most 2 llm.ask calls")
