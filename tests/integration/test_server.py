"""A real MCP client drives `wasmexec serve` over stdio (both protocol eras) and streamable HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import ElicitResult

from tests.helpers import data_of, descendants, error_of, free_port, listening
from tests.integration.conftest import NODE_BIN, SECRET, SERVERS, child_env
from wasmexec import Limits, Runtime, validate_run_result
from wasmexec._server.description import description

MODES = ["legacy", "auto"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, runtime: Runtime) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("serve")
    files = tmp / "files"
    files.mkdir()
    config = {"mcpServers": {
        "slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]},
        "secrets": {"command": sys.executable, "args": [str(SERVERS / "secret_env.py")], "env": {"API_TOKEN": SECRET}},
        "files": {"command": str(NODE_BIN / "mcp-server-filesystem"), "args": [str(files)]},
    }}  # fmt: skip
    (tmp / "mcp.json").write_text(json.dumps(config))
    (tmp / "policy.json").write_text(json.dumps({"deny": ["files.move_file"]}))
    return {"tmp": tmp, "config": tmp / "mcp.json", "policy": tmp / "policy.json", "files": files,
            "audit": tmp / "audit.jsonl", "cache": runtime.artifacts.directory}  # fmt: skip


def _params(setup: dict[str, Path], *options: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--config", str(setup["config"]), "--policy", str(setup["policy"]),
              "--audit-log", str(setup["audit"]), "--timeout-ms", "20000", *options],
        env=child_env(WASMEXEC_CACHE_DIR=str(setup["cache"])),
    )  # fmt: skip


async def _call(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool("run_python", {"code": code, **arguments})
    assert not result.is_error, result
    structured = result.structured_content
    validate_run_result(structured)
    assert result.content[0].text  # the compact rendering for models
    return structured  # type: ignore[return-value]


def _run(setup: dict[str, Path], mode: str, body: Any, *options: str, **client_options: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            async with Client(_params(setup, *options), mode=mode, **client_options) as client:  # type: ignore[arg-type]
                return await body(client)

    return anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_the_server_lists_one_tool_with_its_contract(setup: dict[str, Path], mode: str) -> None:
    async def body(client: Client) -> Any:
        return (await client.list_tools()).tools

    (tool,) = _run(setup, mode, body)
    assert tool.name == "run_python" and tool.description == description(Limits(timeout_ms=20_000))
    assert "20 s wall clock" in tool.description and tool.input_schema["properties"]["timeout_ms"]["maximum"] == 20_000
    assert tool.input_schema["required"] == ["code"] and tool.input_schema["additionalProperties"] is False
    assert "run_id" in tool.output_schema["required"]


@pytest.mark.parametrize("mode", MODES)
def test_code_runs_and_calls_downstream_tools(setup: dict[str, Path], mode: str) -> None:
    async def body(client: Client) -> Any:
        return await _call(client, "import servers.slow as s\nprint('hi')\nawait s.sleep_for(seconds=0.01)")

    result = _run(setup, mode, body)
    assert data_of(result) == {"result": 0.01}
    assert result["logs"][0]["message"] == "hi" and result["tool_trace"][0]["ok"]


def test_failing_code_is_a_normal_result_and_bad_arguments_are_protocol_errors(setup: dict[str, Path]) -> None:
    async def body(client: Client) -> Any:
        failed = await _call(client, "1/0")
        errors = []
        for arguments in ({"code": 5}, {"code": "1", "bogus": True}, {"code": "1", "timeout_ms": "soon"},
                          {"code": "x" * (1024 * 1024 + 1)}, {}):  # fmt: skip
            with pytest.raises(MCPError) as caught:
                await client.call_tool("run_python", arguments)
            errors.append(caught.value.code)
        return failed, errors

    failed, codes = _run(setup, "auto", body)
    assert error_of(failed)["type"] == "ZeroDivisionError"
    assert set(codes) == {-32602}


def test_parallel_runs_overlap(setup: dict[str, Path]) -> None:
    async def body(client: Client) -> float:
        started = time.monotonic()
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(_call, client, "import time\ntime.sleep(0.5)")
        return time.monotonic() - started

    assert _run(setup, "auto", body) < 1.9


def test_progress_is_reported_when_asked_for(setup: dict[str, Path]) -> None:
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)

    async def body(client: Client) -> Any:
        return await client.call_tool("run_python", {"code": "import servers.slow as s\nawait s.sleep_for(seconds=0)"},
                                      progress_callback=on_progress)  # fmt: skip

    _run(setup, "legacy", body)
    assert messages[0] == "running" and "calling slow.sleep_for" in messages and messages[-1] == "done"


def test_a_cancelled_call_stops_its_run_and_the_server_keeps_serving(setup: dict[str, Path]) -> None:
    async def body(client: Client) -> tuple[float, Any]:
        started = time.monotonic()
        with anyio.move_on_after(0.5):
            await client.call_tool("run_python", {"code": "while True: pass"})
        elapsed = time.monotonic() - started
        return elapsed, await _call(client, "result = 'still here'")

    elapsed, result = _run(setup, "legacy", body)
    assert elapsed < 5 and data_of(result) == "still here"


def _elicitation(action: str) -> Any:
    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        return ElicitResult(action=action, content={"approve": True} if action == "accept" else None)

    return on_elicit


WRITE = "import servers.files as f\nawait f.write_file(path={path!r}, content='hello')\nresult = 'written'"


@pytest.mark.parametrize("mode", MODES)  # legacy: pushed elicitation; auto (2026): input-required and retry
@pytest.mark.parametrize(("action", "state"), [("accept", "APPROVED"), ("decline", "DENIED"), ("cancel", "DENIED")])
def test_a_destructive_call_asks_the_user_first(setup: dict[str, Path], action: str, state: str, mode: str) -> None:
    target = setup["files"] / f"{action}-{mode}.txt"

    async def body(client: Client) -> Any:
        assert client.protocol_version.startswith("2026" if mode == "auto" else "2025")
        return await _call(client, WRITE.format(path=str(target)))

    result = _run(setup, mode, body, elicitation_callback=_elicitation(action))
    assert result["approval_state"] == state
    if state == "APPROVED":
        assert data_of(result) == "written" and target.read_text() == "hello"
    else:
        assert error_of(result)["type"] == "ApprovalDeniedError" and not target.exists()


def test_a_run_queued_behind_another_still_has_its_whole_timeout_to_wait_for_an_approval(
    setup: dict[str, Path],
) -> None:
    # One run slot: the second run waits about QUEUED_S for the first, then asks at once and the user
    # takes ANSWER_S to answer. Its clock starts when it starts, so the answer is in time (ANSWER_S is
    # well under its timeout); counted from when the request arrived, the wait would end first.
    queued_s, answer_s, timeout_ms = 3.0, 2.0, 4000
    target = setup["files"] / "queued.txt"

    async def answer_late(ctx: Any, params: Any) -> ElicitResult:
        await anyio.sleep(answer_s)
        return ElicitResult(action="accept", content={"approve": True})

    async def body(client: Client) -> Any:
        results: dict[str, Any] = {}

        async def first() -> None:
            results["first"] = await _call(client, f"import servers.slow as s\nawait s.sleep_for(seconds={queued_s})")

        async def second() -> None:
            await anyio.sleep(0.3)  # after the first has taken the slot
            results["second"] = await _call(client, WRITE.format(path=str(target)), timeout_ms=timeout_ms)

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            group.start_soon(second)
        return results

    results = _run(setup, "legacy", body, "--max-concurrent-runs", "1", elicitation_callback=answer_late)
    assert data_of(results["first"]) == {"result": queued_s}
    assert results["second"]["approval_state"] == "APPROVED", results["second"]
    assert data_of(results["second"]) == "written" and target.read_text() == "hello"


@pytest.mark.parametrize("mode", MODES)
def test_without_elicitation_a_destructive_call_is_denied_with_a_hint(setup: dict[str, Path], mode: str) -> None:
    target = setup["files"] / f"unasked-{mode}.txt"

    async def body(client: Client) -> Any:
        return await _call(client, WRITE.format(path=str(target)))

    result = _run(setup, mode, body)
    assert result["approval_state"] == "DENIED" and not target.exists()
    assert "elicitation" in result["diagnostics"][0]["hint"]


def test_policy_deny_never_reaches_the_server(setup: dict[str, Path]) -> None:
    async def body(client: Client) -> Any:
        return await _call(client, "import servers.files as f\nawait f.move_file(source='a', destination='b')")

    result = _run(setup, "auto", body)
    assert error_of(result)["type"] == "ApprovalDeniedError"
    (refused,) = result["tool_trace"]  # traced as refused; the server never saw it
    assert refused["ok"] is False and refused["error"].startswith("denied:")


def test_configured_secrets_are_redacted_and_the_audit_holds_no_plaintext(setup: dict[str, Path]) -> None:
    async def body(client: Client) -> Any:
        return await _call(client, "import servers.secrets as s\nv = await s.show_env(name='API_TOKEN')\nprint(v)\nv")

    result = _run(setup, "auto", body)
    assert SECRET not in json.dumps(result) and "[REDACTED]" in json.dumps(result)
    lines = [json.loads(line) for line in setup["audit"].read_text().splitlines()]
    kinds = {line["kind"] for line in lines}
    assert kinds == {"run", "tool_call"}
    call = next(line for line in lines if line["kind"] == "tool_call" and line["server"] == "secrets")
    assert call["argument_digest"].startswith("sha256:") and call["redactions"] == 1
    text = setup["audit"].read_text()
    assert SECRET not in text and "API_TOKEN" not in text and "show_env(name" not in text


@pytest.fixture
def http_url(setup: dict[str, Path]) -> Iterator[str]:
    params, port = _params(setup), free_port()
    with listening([params.command, *params.args, "--http", "--port", str(port)], port, params.env) as url:
        yield url


@pytest.mark.parametrize("mode", MODES)
def test_streamable_http_serves_both_eras(http_url: str, mode: str) -> None:
    async def main() -> Any:
        with anyio.fail_after(60):
            async with Client(http_url, mode=mode) as client:  # type: ignore[arg-type]
                return await _call(client, "import servers.slow as s\nawait s.sleep_for(seconds=0)")

    assert data_of(anyio.run(main)) == {"result": 0}


def _start_and_call(setup: dict[str, Path]) -> tuple[subprocess.Popen[bytes], set[int]]:
    """Starts `wasmexec serve` over stdio by hand, makes one call that starts a downstream server."""
    params = _params(setup)
    process = subprocess.Popen([params.command, *params.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env={**os.environ, **(params.env or {})})  # fmt: skip
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict[str, Any]) -> None:
        process.stdin.write((json.dumps(message) + "\n").encode())  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})  # fmt: skip
    process.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_python", "arguments": {
        "code": "import servers.slow as s\nawait s.sleep_for(seconds=0)"}}})  # fmt: skip
    reply = json.loads(process.stdout.readline())
    assert reply["result"]["structuredContent"]["result"]["ok"], reply
    children = descendants(process.pid)
    assert children  # the downstream server runs
    return process, children


def _gone(pids: set[int]) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() for pid in pids):
            return True
        time.sleep(0.05)
    return False


def test_stdin_eof_stops_the_server_and_its_downstream_servers(setup: dict[str, Path]) -> None:
    process, children = _start_and_call(setup)
    process.stdin.close()  # type: ignore[union-attr]
    assert process.wait(timeout=30) == 0
    process.stdout.close()  # type: ignore[union-attr]
    assert _gone(children)


def test_sigterm_stops_the_server_and_its_downstream_servers(setup: dict[str, Path]) -> None:
    process, children = _start_and_call(setup)
    process.terminate()
    process.wait(timeout=30)
    process.stdin.close()  # type: ignore[union-attr]
    process.stdout.close()  # type: ignore[union-attr]
    assert _gone(children)
