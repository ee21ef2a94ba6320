"""2026-era sampling by replay across replicas: `codemode.llm.ask` ends the run with an input-required
result whose sealed state carries the log, and the retry, on whichever replica gets it, replays the code
with the client's answer. Real `wasmexec serve --http` replicas sharing --state-dir and --state-key-file
(the fixtures of test_replica_approvals), a real 2026 client whose sampling callback is the model, and
tests/servers/counter.py to see that a tool called between two asks ran once.
"""

from __future__ import annotations

from typing import Any

from mcp import Client, MCPError
from mcp.types import CallToolResult, CreateMessageRequestParams, CreateMessageResult, InputRequiredResult, TextContent

from tests.helpers import data_of
from tests.integration import test_replica_approvals as approvals
from tests.integration.test_replica_approvals import _arguments, _calls, _refused, _result, _run

shared = approvals.shared  # the fixtures: this module's own pair of replicas
pair = approvals.pair

TWO_ASKS = """
import asyncio
from codemode import llm
import servers.counter as c
a = await llm.ask("first {tag}", max_tokens=40)
v = await c.read_value(key="{tag}")
b, d = await asyncio.gather(llm.ask("second " + a, max_tokens=40), llm.ask("third {tag}", max_tokens=40))
result = [a, v["value"], b, d]
"""


async def _model(ctx: Any, params: CreateMessageRequestParams) -> CreateMessageResult:
    prompt = params.messages[0].content
    text = f"echo: {prompt.text}" if isinstance(prompt, TextContent) else "?"
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text=text), model="m")


async def _send(url: str, arguments: dict[str, Any], state: str | None = None, answers: Any = None) -> Any:
    """One tools/call round to one replica: the first call, or a retry with the model's answers and `state`."""
    async with Client(url, sampling_callback=_model) as client:
        assert client.protocol_version.startswith("2026")
        try:
            return await client.session.call_tool("run_python", arguments, allow_input_required=True,
                                                   input_responses=answers, request_state=state)  # fmt: skip
        except MCPError as error:
            return error


async def _answer(reply: InputRequiredResult) -> dict[str, Any]:
    """What the client's model answers to each sampling request of an input-required round."""
    requests = reply.input_requests or {}
    assert requests and all(name.startswith("sampling-") for name in requests), requests
    return {name: await _model(None, request.params) for name, request in requests.items()}  # type: ignore[union-attr]


def test_two_sampling_rounds_and_a_tool_finish_with_every_retry_on_the_other_replica(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    arguments = _arguments(TWO_ASKS.format(tag="k-samp"))

    async def body() -> tuple[Any, list[int]]:
        reply = await _send(pair[0], arguments)
        sizes = []
        for turn in range(1, 6):
            if not isinstance(reply, InputRequiredResult):
                break
            sizes.append(len(reply.input_requests or {}))
            assert reply.request_state
            reply = await _send(pair[turn % 2], arguments, reply.request_state, await _answer(reply))
        return reply, sizes

    reply, sizes = _run(body)
    result = _result(reply)
    value = data_of(result)[1]
    assert data_of(result) == ["echo: first k-samp", value, "echo: second echo: first k-samp", "echo: third k-samp"]
    assert sizes == [1, 2]  # the gathered questions are asked in one round
    assert _calls(shared, "read_value", key="k-samp") == 1  # the tool ran once; the replays answered it from the log
    assert [entry["tool_name"] for entry in result["tool_trace"]].count("llm.ask") == 3


def test_a_tampered_sampling_state_is_refused_and_nothing_runs(shared: dict[str, Any], pair: tuple[str, str]) -> None:
    arguments = _arguments(TWO_ASKS.format(tag="k-samp-bad"))

    async def body() -> list[Any]:
        reply = await _send(pair[0], arguments)
        assert isinstance(reply, InputRequiredResult) and reply.request_state
        reply = await _send(pair[1], arguments, reply.request_state, await _answer(reply))  # reads the value
        assert isinstance(reply, InputRequiredResult) and reply.request_state
        state = reply.request_state
        middle = len(state) // 2
        tampered = state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]
        other_code = _arguments(TWO_ASKS.format(tag="k-samp-bad") + "\nresult = 'other'")
        answers = await _answer(reply)
        return [await _send(pair[0], arguments, tampered, answers), await _send(pair[0], other_code, state, answers)]

    for reply in _run(body):
        _refused(reply)
    assert _calls(shared, "read_value", key="k-samp-bad") == 1


def test_a_replay_that_does_not_ask_the_paused_question_again_is_a_divergence(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    code = """
import random
from codemode import llm
result = await llm.ask(f"pick {random.random()}", max_tokens=40)
"""
    arguments = {"code": code}

    async def body() -> Any:
        reply = await _send(pair[0], arguments)
        assert isinstance(reply, InputRequiredResult) and reply.request_state
        return await _send(pair[1], arguments, reply.request_state, await _answer(reply))

    reply = _run(body)
    assert isinstance(reply, CallToolResult) and reply.structured_content is not None
    error = reply.structured_content["result"]["error"]
    assert error["type"] == "ReplayDivergedError", error
