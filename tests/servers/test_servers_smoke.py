"""Smoke tests of the test servers: each one started as a real subprocess and driven by the real mcp `Client`.

Our servers (tests/servers/*.py) are mcp 2.3 servers, so `mode="auto"` negotiates 2026-07-28 and
`mode="legacy"` forces the 2025-11-25 handshake; most tests run in both. The npm reference servers and
`mcp-server-time` come from scripts/install-test-servers.sh; their tests are skipped, saying so, when it
has not been run.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.subscriptions import ToolsListChanged
from mcp.types import REQUEST_TIMEOUT, ImageContent, TextContent, ToolListChangedNotification

HERE = Path(__file__).resolve().parent
NODE_BIN = HERE / "node" / "node_modules" / ".bin"
INSTALL_HINT = "run scripts/install-test-servers.sh first"

MODES = ["legacy", "auto"]
ERA = {"legacy": "2025-11-25", "auto": "2026-07-28"}  # what each mode negotiates with an mcp 2.3 server
TIMEOUT = 20.0  # upper bound for one test; each normally takes about a second

AWKWARD_NAMES = {
    "get.user",
    "get-user",
    "getUser",
    "GetUser",
    "list",
    "class",
    "2fa_check",
    "fetch_HTTPResponse",
    "delete_item",
    "complex_input",
    "structured_output",
    "error_result",
    "image_result",
    "two_texts",
    "echo_args",
    "reformat",
}


def server(name: str, *args: str, env: dict[str, str] | None = None, **kwargs: Any) -> StdioServerParameters:
    """How to start tests/servers/<name>.py over stdio with this interpreter."""
    return StdioServerParameters(command=sys.executable, args=[str(HERE / f"{name}.py"), *args], env=env, **kwargs)


def run(fn: Callable[[], Awaitable[None]], timeout: float = TIMEOUT) -> None:
    """Run an async test body, failing it if it takes longer than `timeout` seconds."""

    async def bounded() -> None:
        with anyio.fail_after(timeout):
            await fn()

    anyio.run(bounded)


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content if isinstance(block, TextContent)]


def tool_names(tools: Any) -> set[str]:
    return {tool.name for tool in tools.tools}


# --- awkward ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_awkward_lists_awkward_names_and_exact_schemas(mode: str) -> None:
    async def body() -> None:
        async with Client(server("awkward"), mode=mode) as client:
            assert client.protocol_version == ERA[mode]
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == AWKWARD_NAMES
            assert tools["delete_item"].annotations is not None
            assert tools["delete_item"].annotations.destructive_hint is True
            assert tools["get.user"].annotations is not None
            assert tools["get.user"].annotations.read_only_hint is True
            assert set(tools["class"].input_schema["properties"]) == {"class", "from"}

            schema = tools["complex_input"].input_schema
            assert schema["properties"]["address"] == {"$ref": "#/$defs/Address"}
            assert schema["$defs"]["Priority"]["enum"] == ["low", "normal", "high"]
            assert schema["properties"]["mode"]["default"] == "safe"
            assert schema["properties"]["options"]["properties"]["retries"]["default"] == 3
            assert schema["properties"]["points"]["items"] == {"$ref": "#/$defs/Point"}
            assert schema["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
            assert schema["properties"]["nickname"] == {"type": ["string", "null"]}
            assert schema["additionalProperties"] is False
            assert tools["structured_output"].output_schema is not None
            assert tools["structured_output"].output_schema["required"] == ["sum", "product", "operands"]

    run(body)


@pytest.mark.parametrize("mode", MODES)
def test_awkward_calls(mode: str) -> None:
    async def body() -> None:
        async with Client(server("awkward"), mode=mode) as client:
            # The two tools that both map to get_user are distinct on the wire.
            assert texts(await client.call_tool("get.user", {"id": "7"})) == ['get.user {"id":"7"}']
            assert texts(await client.call_tool("get-user", {"id": "7"})) == ['get-user {"id":"7"}']
            assert texts(await client.call_tool("class", {"class": "x", "from": 1})) == ['class {"class":"x","from":1}']

            result = await client.call_tool("structured_output", {"a": 2, "b": 3})
            assert not result.is_error
            assert result.structured_content == {"sum": 5.0, "product": 6.0, "operands": [2.0, 3.0]}
            assert json.loads(texts(result)[0]) == result.structured_content

            result = await client.call_tool("error_result", {"message": "nope"})
            assert result.is_error is True
            assert texts(result) == ["nope"]

            result = await client.call_tool("image_result", {})
            assert len(result.content) == 1
            image = result.content[0]
            assert isinstance(image, ImageContent)
            assert image.mime_type == "image/png"
            assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")

            assert texts(await client.call_tool("two_texts", {})) == ["first block", "second block"]

            args = {"b": [1, None, {"c": "é"}], "a": True}
            assert json.loads(texts(await client.call_tool("echo_args", args))[0]) == args
            # Not validated by the server: what arrives is echoed as is.
            received = json.loads(texts(await client.call_tool("complex_input", {"address": {"city": "Oslo"}}))[0])
            assert received == {"address": {"city": "Oslo"}}

            with pytest.raises(MCPError):
                await client.call_tool("get_user", {"id": "7"})

    run(body)


# --- slow ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_slow_calls_run_concurrently(mode: str) -> None:
    async def body() -> None:
        async with Client(server("slow"), mode=mode) as client:
            results: list[Any] = []

            async def one() -> None:
                results.append(await client.call_tool("sleep_for", {"seconds": 0.5}))

            started = time.monotonic()
            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(one)
            elapsed = time.monotonic() - started
            assert [r.structured_content for r in results] == [{"result": 0.5}] * 4
            assert elapsed < 1.5, f"4 x 0.5 s took {elapsed:.2f} s: the calls did not overlap"

    run(body)


# --- crashy ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_crashy_crash_closes_the_connection_and_a_new_one_works(mode: str) -> None:
    async def body() -> None:
        async with Client(server("crashy"), mode=mode) as client:
            assert texts(await client.call_tool("ok", {})) == ["ok"]
            first_pid = (await client.call_tool("pid", {})).structured_content
            with pytest.raises(MCPError) as info:
                await client.call_tool("crash", {})
            assert "closed" in str(info.value).lower()
        async with Client(server("crashy"), mode=mode) as client:
            assert texts(await client.call_tool("ok", {})) == ["ok"]
            assert (await client.call_tool("pid", {})).structured_content != first_pid

    run(body)


# --- hang ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_hang_times_out_and_the_connection_survives(mode: str) -> None:
    async def body() -> None:
        async with Client(server("hang"), mode=mode) as client:
            started = time.monotonic()
            with pytest.raises(MCPError) as info:
                await client.call_tool("hang", {}, read_timeout_seconds=0.5)
            assert info.value.code == REQUEST_TIMEOUT
            assert time.monotonic() - started < 3
            with anyio.move_on_after(0.3) as scope:  # cancelling the caller's scope cancels the call
                await client.call_tool("hang", {})
            assert scope.cancelled_caught
            assert texts(await client.call_tool("ok", {})) == ["ok"]

    run(body)


# --- garbage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_garbage_lines_on_the_wire_are_skipped(mode: str) -> None:
    async def body() -> None:
        parse_errors: list[Exception] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception):
                parse_errors.append(message)

        async with Client(server("garbage"), mode=mode, message_handler=on_message) as client:
            assert client.protocol_version == ERA[mode]
            assert tool_names(await client.list_tools()) == {"wire_garbage", "noisy_print", "ok"}
            for kind in ("text", "json", "partial", "response", "notification"):
                result = await client.call_tool("wire_garbage", {"kind": kind, "lines": 2})
                assert texts(result) == ["ok"], kind
            assert texts(await client.call_tool("noisy_print", {})) == ["ok"]
            assert texts(await client.call_tool("ok", {})) == ["ok"]
        # 3 start-up lines, then 2 each of text, json and partial; a stray response and an unknown
        # notification are dropped without reaching message_handler.
        assert len(parse_errors) == 3 + 2 * 3

    run(body)


@pytest.mark.parametrize("mode", MODES)
def test_garbage_non_utf8_bytes_are_replaced_when_asked(mode: str) -> None:
    async def body() -> None:
        params = server("garbage", encoding_error_handler="replace")
        async with Client(params, mode=mode) as client:
            assert texts(await client.call_tool("wire_garbage", {"kind": "binary"})) == ["ok"]
            assert texts(await client.call_tool("ok", {})) == ["ok"]

    run(body)


def test_garbage_non_utf8_bytes_break_a_strict_connection() -> None:
    """With the default strict decoding the stdio reader dies: the pending call then gets no answer
    (here: until its read timeout) and leaving the Client raises the UnicodeDecodeError."""

    async def body() -> None:
        async with Client(server("garbage"), mode="legacy") as client:
            await client.call_tool("wire_garbage", {"kind": "binary"}, read_timeout_seconds=1)

    with pytest.raises(ExceptionGroup) as info:
        run(body)
    assert info.value.subgroup(UnicodeDecodeError) is not None, repr(info.value)


# --- changing --------------------------------------------------------------------------------------


def test_changing_notifies_legacy_clients_with_a_notification() -> None:
    async def body() -> None:
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, ToolListChangedNotification):
                changed.set()

        async with Client(server("changing"), mode="legacy", message_handler=on_message) as client:
            assert client.protocol_version == ERA["legacy"]
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed is True
            assert tool_names(await client.list_tools()) == {"add_tool", "remove_tool", "list_names"}
            assert texts(await client.call_tool("add_tool", {"name": "new.tool"})) == ["added new.tool"]
            with anyio.fail_after(5):
                await changed.wait()
            assert "new.tool" in tool_names(await client.list_tools())
            assert texts(await client.call_tool("new.tool", {"x": 1})) == ['new.tool called with {"x": 1}']
            names = (await client.call_tool("list_names", {})).structured_content
            assert names == {"names": ["add_tool", "remove_tool", "list_names", "new.tool"]}
            assert (await client.call_tool("add_tool", {"name": "new.tool"})).is_error
            assert (await client.call_tool("add_tool", {"name": "bad name"})).is_error

    run(body)


def test_changing_notifies_2026_clients_on_a_listen_stream() -> None:
    async def body() -> None:
        async with Client(server("changing"), mode="auto") as client:
            assert client.protocol_version == ERA["auto"]
            assert client.server_capabilities.tools is not None
            assert client.server_capabilities.tools.list_changed is True
            async with client.listen(tools_list_changed=True) as subscription:
                assert texts(await client.call_tool("add_tool", {"name": "fresh"})) == ["added fresh"]
                with anyio.fail_after(5):
                    event = await anext(subscription)
                assert isinstance(event, ToolsListChanged)
                assert "fresh" in tool_names(await client.list_tools())
                assert texts(await client.call_tool("remove_tool", {"name": "fresh"})) == ["removed fresh"]
                with anyio.fail_after(5):
                    assert isinstance(await anext(subscription), ToolsListChanged)
                assert "fresh" not in tool_names(await client.list_tools())

    run(body)


# --- secret_env ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_secret_env_reaches_the_server(mode: str) -> None:
    secret = "s3cr3t-value-for-the-smoke-test"

    async def body() -> None:
        params = server("secret_env", env={"WASMEXEC_TEST_SECRET": secret})
        async with Client(params, mode=mode) as client:
            result = await client.call_tool("show_env", {"name": "WASMEXEC_TEST_SECRET"})
            assert texts(result) == [secret]
            assert result.structured_content == {"result": secret}
            unset = await client.call_tool("show_env", {"name": "WASMEXEC_TEST_UNSET"})
            assert unset.structured_content == {"result": None}
            failed = await client.call_tool("show_env_error", {"name": "WASMEXEC_TEST_SECRET"})
            assert failed.is_error is True
            assert secret in texts(failed)[0]

    run(body)


# --- big -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_big_answers_text_or_many_small_items_of_the_asked_size(mode: str) -> None:
    async def body() -> None:
        async with Client(server("big"), mode=mode) as client:
            assert texts(await client.call_tool("small", {})) == ["ok"]
            assert texts(await client.call_tool("big_reply", {"size": 1000})) == ["x" * 1000]
            result = await client.call_tool("big_reply", {"size": 1000, "shape": "items"})
            assert result.structured_content is not None
            items = result.structured_content["items"]
            assert items[:2] == [{"n": 0}, {"n": 1}] and 900 < len(json.dumps(items, separators=(",", ":"))) < 1100

    run(body)


# --- streamable HTTP -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[Callable[[str], str]]:
    """Starts tests/servers/<name>.py --http PORT; yields a function returning the server's /mcp URL."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> str:
        port = _free_port()
        process = subprocess.Popen([sys.executable, str(HERE / f"{name}.py"), "--http", str(port)])
        processes.append(process)
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return f"http://127.0.0.1:{port}/mcp"
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name}.py --http {port} did not start (exit {process.poll()})") from None
                time.sleep(0.05)

    yield start
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.mark.parametrize("mode", MODES)
def test_awkward_over_http(mode: str, http_server: Callable[[str], str]) -> None:
    url = http_server("awkward")

    async def body() -> None:
        async with Client(url, mode=mode) as client:
            assert client.protocol_version == ERA[mode]
            assert tool_names(await client.list_tools()) == AWKWARD_NAMES
            result = await client.call_tool("structured_output", {"a": 1, "b": 4})
            assert result.structured_content == {"sum": 5.0, "product": 4.0, "operands": [1.0, 4.0]}

    run(body)


def test_changing_over_http_in_both_eras(http_server: Callable[[str], str]) -> None:
    url = http_server("changing")

    async def body() -> None:
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, ToolListChangedNotification):
                changed.set()

        async with Client(url, mode="legacy", message_handler=on_message) as client:
            assert client.protocol_version == ERA["legacy"]
            await client.call_tool("add_tool", {"name": "via_legacy"})
            with anyio.fail_after(5):
                await changed.wait()
        async with Client(url, mode="auto") as client:
            assert client.protocol_version == ERA["auto"]
            async with client.listen(tools_list_changed=True) as subscription:
                await client.call_tool("add_tool", {"name": "via_modern"})
                with anyio.fail_after(5):
                    assert isinstance(await anext(subscription), ToolsListChanged)
            # One process serves both connections, so both additions are visible.
            assert {"via_legacy", "via_modern"} <= tool_names(await client.list_tools())

    run(body)


# --- installed third-party servers (scripts/install-test-servers.sh) -------------------------------


def _node_server(binary: str) -> Path:
    path = NODE_BIN / binary
    if not path.exists():
        pytest.skip(f"{path.relative_to(HERE.parent.parent)} is missing: {INSTALL_HINT}")
    return path


@pytest.mark.parametrize("mode", MODES)
def test_npm_server_everything(mode: str) -> None:
    binary = _node_server("mcp-server-everything")

    async def body() -> None:
        async with Client(StdioServerParameters(command=str(binary), args=["stdio"]), mode=mode) as client:
            assert client.protocol_version == "2025-11-25"  # TS SDK 1.x: auto mode falls back
            assert {"echo", "get-sum", "get-tiny-image"} <= tool_names(await client.list_tools())
            assert texts(await client.call_tool("echo", {"message": "hi"})) == ["Echo: hi"]

    run(body)


@pytest.mark.parametrize("mode", MODES)
def test_npm_server_filesystem(mode: str, tmp_path: Path) -> None:
    binary = _node_server("mcp-server-filesystem")
    (tmp_path / "hello.txt").write_text("hello from the smoke test\n")

    async def body() -> None:
        async with Client(StdioServerParameters(command=str(binary), args=[str(tmp_path)]), mode=mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {"read_text_file", "write_file", "list_allowed_directories"} <= set(tools)
            assert tools["write_file"].annotations is not None
            assert tools["write_file"].annotations.destructive_hint is True
            result = await client.call_tool("read_text_file", {"path": str(tmp_path / "hello.txt")})
            assert "hello from the smoke test" in texts(result)[0]

    run(body)


@pytest.mark.parametrize("mode", MODES)
def test_npm_server_memory(mode: str, tmp_path: Path) -> None:
    binary = _node_server("mcp-server-memory")
    memory_file = tmp_path / "memory.jsonl"

    async def body() -> None:
        params = StdioServerParameters(command=str(binary), env={"MEMORY_FILE_PATH": str(memory_file)})
        async with Client(params, mode=mode) as client:
            assert {"create_entities", "read_graph", "delete_entities"} <= tool_names(await client.list_tools())
            result = await client.call_tool("read_graph", {})
            assert not result.is_error
            assert result.structured_content == {"entities": [], "relations": []}

    run(body)


@pytest.mark.parametrize("mode", MODES)
def test_pypi_mcp_server_time(mode: str) -> None:
    if importlib.util.find_spec("mcp_server_time") is None:
        pytest.skip(f"mcp-server-time is not installed in {sys.prefix}: {INSTALL_HINT}")

    async def body() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
        )
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == ERA[mode]  # built on mcp 2.3, like ours
            assert tool_names(await client.list_tools()) == {"get_current_time", "convert_time"}
            result = await client.call_tool("get_current_time", {"timezone": "UTC"})
            assert not result.is_error
            assert result.structured_content is not None
            assert result.structured_content["timezone"] == "UTC"

    run(body)
