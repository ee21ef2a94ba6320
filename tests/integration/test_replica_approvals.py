"""2026-era approvals by replay across replicas: real `wasmexec serve --http` processes sharing one
--state-dir and one --state-key-file, a real 2026 client that drives the input-required rounds itself
(so each retry can go to the replica the test picks), and tests/servers/counter.py, whose tools write
down every call in one file, so "the destructive tool ran exactly once" is checked across processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import CallToolResult, ElicitResult, InputRequiredResult

from tests.helpers import data_of, error_of, start_serve_http, wait_for_health
from tests.integration.conftest import SERVERS
from wasmexec import Runtime, validate_run_result

LAUNCH = """
import servers.counter as c
v = await c.read_value(key={key!r})
r = await c.launch(name={name!r})
result = {{"v": v["value"], "launched": r["launched"]}}
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, runtime: Runtime) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("replicas")
    key = tmp / "state.key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    calls = tmp / "calls.log"
    calls.touch()
    config = {"mcpServers": {"counter": {"command": sys.executable, "args": [str(SERVERS / "counter.py")],
                                         "env": {"COUNTER_FILE": str(calls)}}}}  # fmt: skip
    (tmp / "mcp.json").write_text(json.dumps(config))
    return {"tmp": tmp, "key": key, "calls": calls, "config": tmp / "mcp.json", "state": tmp / "state",
            "cache": runtime.artifacts.directory}  # fmt: skip


@contextmanager
def _replica(shared: dict[str, Any], name: str, *options: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """One `serve --http` replica on the shared state dir and key; yields its URL and process."""
    options = ["--timeout-ms", "20000", "--config", str(shared["config"]), "--audit-log",
               str(shared["tmp"] / f"audit-{name}.jsonl"), "--state-dir", str(shared["state"]), "--state-key-file",
               str(shared["key"]), *options]  # fmt: skip
    env = {**os.environ, "WASMEXEC_CACHE_DIR": str(shared["cache"]), "XDG_STATE_HOME": str(shared["tmp"] / "xdg")}
    stderr = shared["tmp"] / f"replica-{name}.log"
    process, port = start_serve_http(options, env, stderr)
    try:
        wait_for_health(port, process, stderr)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def pair(shared: dict[str, Any]) -> Iterator[tuple[str, str]]:
    with _replica(shared, "A") as (a, _), _replica(shared, "B") as (b, _):
        yield a, b


async def _unused(ctx: Any, params: Any) -> ElicitResult:
    raise AssertionError("the test answers approvals itself")


def _arguments(code: str, **extra: Any) -> dict[str, Any]:
    return {"code": code, "servers": ["counter"], **extra}


async def _send(url: str, arguments: dict[str, Any], state: str | None = None, approve: bool = True) -> Any:
    """One tools/call round to one replica: the first call, or a retry with the user's answer and `state`."""
    answer = ElicitResult(action="accept", content={"approve": True}) if approve else ElicitResult(action="decline")
    async with Client(url, elicitation_callback=_unused) as client:
        assert client.protocol_version.startswith("2026")
        if "session_id" in arguments:
            await client.list_tools()  # the session id also travels in a header the listing declares
        try:
            return await client.session.call_tool("run_python", arguments, allow_input_required=True,
                                                   input_responses={"approval": answer} if state else None,
                                                   request_state=state)  # fmt: skip
        except MCPError as error:  # returned from inside the client: leaving it would wrap it in a group
            return error


def _run(body: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            return await body()

    return anyio.run(main)


def _paused(reply: Any) -> str:
    assert isinstance(reply, InputRequiredResult), reply
    assert "approval" in (reply.input_requests or {}) and reply.request_state
    return reply.request_state


def _result(reply: Any) -> dict[str, Any]:
    assert isinstance(reply, CallToolResult) and not reply.is_error, reply
    validate_run_result(reply.structured_content)
    return reply.structured_content  # type: ignore[return-value]


def _calls(shared: dict[str, Any], tool: str, **arguments: str) -> int:
    line = f"{tool} {json.dumps(arguments, sort_keys=True)}"
    return shared["calls"].read_text().splitlines().count(line)


def _audit(shared: dict[str, Any], name: str) -> list[dict[str, Any]]:
    path = shared["tmp"] / f"audit-{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_approval_paused_on_a_replica_that_is_then_killed_finishes_on_another_and_runs_once(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    arguments = _arguments(LAUNCH.format(key="k-kill", name="kill"))
    with _replica(shared, "doomed") as (doomed, process):
        state = _paused(_run(lambda: _send(doomed, arguments)))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    result = _result(_run(lambda: _send(pair[1], arguments, state)))
    assert data_of(result) == {"v": data_of(result)["v"], "launched": "kill"} and result["approval_state"] == "APPROVED"
    assert _calls(shared, "launch", name="kill") == 1
    assert _calls(shared, "read_value", key="k-kill") == 1  # the replay answered it from the log
    lines = [line for line in _audit(shared, "B") if line.get("replay_of") and line["kind"] == "tool_call"]
    replayed = [line for line in lines if line["tool"] == "read_value"]
    launched = [line for line in lines if line["tool"] == "launch"]
    assert [line["outcome"] for line in replayed] == ["replayed"]
    assert [(line["outcome"], line["approval"]) for line in launched] == [("ok", "approved")]


def test_ten_approvals_finish_with_every_retry_sent_to_the_other_replica(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    async def body() -> list[dict[str, Any]]:
        results = []
        for index in range(10):
            first, other = pair if index % 2 == 0 else pair[::-1]
            arguments = _arguments(LAUNCH.format(key=f"k-rr{index}", name=f"rr{index}"))
            state = _paused(await _send(first, arguments))
            results.append(_result(await _send(other, arguments, state)))
        return results

    results = _run(body)
    assert [data_of(result)["launched"] for result in results] == [f"rr{index}" for index in range(10)]
    assert [_calls(shared, "launch", name=f"rr{index}") for index in range(10)] == [1] * 10
    assert [_calls(shared, "read_value", key=f"k-rr{index}") for index in range(10)] == [1] * 10


def test_a_second_retry_of_the_same_state_gets_the_recorded_answer_and_nothing_runs_again(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    arguments = _arguments(LAUNCH.format(key="k-twice", name="twice"))

    async def body() -> tuple[Any, Any]:
        state = _paused(await _send(pair[0], arguments))
        return await _send(pair[1], arguments, state), await _send(pair[0], arguments, state)

    first, second = _run(body)
    assert _result(first)["run_id"] == _result(second)["run_id"] and data_of(_result(second))["launched"] == "twice"
    assert _calls(shared, "launch", name="twice") == 1


def test_a_replay_whose_code_does_not_repeat_itself_is_a_clear_error_and_the_tool_does_not_run(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    code = """
import random
import servers.counter as c
await c.read_value(key=f"k-random-{random.random()}")
await c.launch(name="diverge")
"""
    arguments = _arguments(code)

    async def body() -> Any:
        state = _paused(await _send(pair[0], arguments))
        return await _send(pair[1], arguments, state)

    result = _result(_run(body))
    error = error_of(result)
    assert error["type"] == "ReplayDivergedError" and "counter.read_value" in error["message"]
    (note,) = [d for d in result["diagnostics"] if d["code"] == "REPLAY_DIVERGED"]
    assert "random numbers" in note["hint"]
    assert _calls(shared, "launch", name="diverge") == 0


def test_several_approvals_in_one_run_pause_again_and_the_log_grows(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    code = """
import asyncio
import servers.counter as c
first = await c.launch(name="multi-1")
values = await asyncio.gather(c.read_value(key="k-multi-a"), c.read_value(key="k-multi-b"))
second = await c.launch(name="multi-2")
result = [first["launched"], second["launched"], [v["value"] for v in values]]
"""
    arguments = _arguments(code)

    async def body() -> Any:
        state = _paused(await _send(pair[0], arguments))
        again = _paused(await _send(pair[1], arguments, state))
        return await _send(pair[0], arguments, again)

    result = _result(_run(body))
    assert data_of(result)[:2] == ["multi-1", "multi-2"] and result["approval_state"] == "APPROVED"
    assert [_calls(shared, "launch", name=f"multi-{n}") for n in (1, 2)] == [1, 1]
    assert [_calls(shared, "read_value", key=f"k-multi-{k}") for k in "ab"] == [1, 1]


def test_a_declined_approval_is_replayed_as_denied_and_the_tool_does_not_run(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    arguments = _arguments(LAUNCH.format(key="k-no", name="declined"))

    async def body() -> Any:
        state = _paused(await _send(pair[0], arguments))
        return await _send(pair[1], arguments, state, approve=False)

    result = _result(_run(body))
    assert error_of(result)["type"] == "ApprovalDeniedError" and result["approval_state"] == "DENIED"
    assert _calls(shared, "launch", name="declined") == 0


def _refused(reply: Any) -> None:
    assert isinstance(reply, MCPError) and reply.code == -32602, reply
    assert reply.error.message == "Invalid or expired requestState"


def test_tampered_expired_and_other_request_states_are_refused_and_the_tool_does_not_run(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    arguments = _arguments(LAUNCH.format(key="k-bad", name="refused"))
    short = _arguments(LAUNCH.format(key="k-late", name="late"), timeout_ms=1500)

    async def body() -> list[Any]:
        state = _paused(await _send(pair[0], arguments))
        middle = len(state) // 2
        tampered = state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]
        other_code = _arguments(LAUNCH.format(key="k-bad", name="refused") + "\nresult = 'other'")
        replies = [await _send(pair[1], arguments, tampered), await _send(pair[1], other_code, state),
                   await _send(pair[1], {**arguments, "timeout_ms": 19_000}, state)]  # fmt: skip
        started = time.monotonic()
        late = _paused(await _send(pair[0], short))
        await anyio.sleep(max(0.0, 1.6 - (time.monotonic() - started)))  # past the run's own deadline
        replies.append(await _send(pair[1], short, late))
        return replies

    for reply in _run(body):
        _refused(reply)
    assert _calls(shared, "launch", name="refused") == 0 and _calls(shared, "launch", name="late") == 0


def test_the_same_state_sent_again_while_its_replay_runs_is_refused(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    code = LAUNCH.format(key="k-busy", name="busy") + "\nimport time\ntime.sleep(2)\n"
    arguments = _arguments(code)

    async def body() -> tuple[Any, Any]:
        state = _paused(await _send(pair[0], arguments))
        replies: dict[str, Any] = {}

        async def first() -> None:
            replies["first"] = await _send(pair[1], arguments, state)

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            while _calls(shared, "launch", name="busy") == 0:  # the replay has run the approved call
                await anyio.sleep(0.02)
            replies["second"] = await _send(pair[0], arguments, state)
        return replies["first"], replies["second"]

    first, second = _run(body)
    assert data_of(_result(first))["launched"] == "busy"
    _refused(second)
    assert _calls(shared, "launch", name="busy") == 1


def test_a_paused_approval_holds_no_run_slot(shared: dict[str, Any]) -> None:
    arguments = _arguments(LAUNCH.format(key="k-slot", name="slot"))
    with _replica(shared, "one-slot", "--max-concurrent-runs", "1", "--max-queued-runs", "0") as (url, _):

        async def body() -> tuple[Any, Any]:
            state = _paused(await _send(url, arguments))
            other = await _send(url, {"code": "result = 'ran while the approval waits'"})
            return other, await _send(url, arguments, state)

        other, finished = _run(body)
    assert data_of(_result(other)) == "ran while the approval waits"
    assert data_of(_result(finished))["launched"] == "slot" and _calls(shared, "launch", name="slot") == 1


def test_a_paused_run_in_a_session_is_replayed_on_the_sessions_files_and_the_session_goes_on(
    shared: dict[str, Any], pair: tuple[str, str]
) -> None:
    code = """
import servers.counter as c
with open("notes.txt", "a") as f:
    f.write("x")
await c.launch(name="in-session")
result = open("notes.txt").read()
"""

    async def body() -> tuple[Any, Any]:
        opened = _result(await _send(pair[0], {"code": "open('notes.txt', 'w').write('start:')", "session": True}))
        arguments = _arguments(code, session_id=opened["session_id"])
        state = _paused(await _send(pair[0], arguments))  # the paused run kept nothing in the session
        return _result(await _send(pair[0], arguments, state)), opened["session_id"]

    result, session_id = _run(body)
    assert data_of(result) == "start:x" and result["session_id"] == session_id
    assert _calls(shared, "launch", name="in-session") == 1
