"""A real MCP client and `wasmexec serve`: files in, artifacts as resources, sessions, in both protocol eras."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import EmbeddedResource, ImageContent, ResourceLink, TextResourceContents

from tests.helpers import data_of, diagnostic, free_port, limit_of, listening
from tests.integration.conftest import child_env
from wasmexec import Runtime, validate_run_result

MODES = ["legacy", "auto"]  # the 2025-11-25 handshake, and the 2026-07-28 era

#: A 4x4 red PNG made with the standard library only (zlib, struct), as a chart library would write it.
WRITE_PNG = """
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
rows = b"".join(b"\\x00" + b"\\xff\\x00\\x00" * 4 for _ in range(4))
png = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
with open("chart.png", "wb") as f:
    f.write(png)
with open("summary.csv", "w") as f:
    f.write("city,total\\nOslo,3\\n")
result = {"png_bytes": len(png)}
"""


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("serve-state")


def _params(runtime: Runtime, state: Path, *options: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--no-audit", "--timeout-ms", "20000", *options],
        env=child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory), XDG_STATE_HOME=str(state)),
    )


def _sessions_dir(state: Path) -> Path:
    return state / "wasmexec" / "sessions"


async def _call(client: Client, code: str, **arguments: Any) -> tuple[dict[str, Any], list[Any]]:
    reply = await client.call_tool("run_python", {"code": code, **arguments})
    assert not reply.is_error, reply
    validate_run_result(reply.structured_content)
    return reply.structured_content, reply.content  # type: ignore[return-value]


def _stdio(runtime: Runtime, state: Path, mode: str, body: Any, *options: str) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            async with Client(_params(runtime, state, *options), mode=mode) as client:  # type: ignore[arg-type]
                return await body(client)

    return anyio.run(main)


@pytest.fixture(scope="module")
def http_url(runtime: Runtime, state: Path) -> Iterator[str]:
    params, port = _params(runtime, state), free_port()
    with listening([params.command, *params.args, "--http", "--port", str(port)], port, params.env) as url:
        yield url


def _http(url: str, body: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            return await body()

    return anyio.run(main)


# -- artifacts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_png_the_code_writes_reaches_the_client_as_an_image_and_as_a_resource(
    runtime: Runtime, state: Path, mode: str
) -> None:
    async def body(client: Client) -> Any:
        result, content = await _call(client, WRITE_PNG)
        links = {block.name: block for block in content if isinstance(block, ResourceLink)}
        read = await client.read_resource(links["chart.png"].uri)
        listed = (await client.list_resources()).resources
        return result, content, links, read, listed

    result, content, links, read, listed = _stdio(runtime, state, mode, body)
    png = next(block for block in content if isinstance(block, ImageContent))
    assert png.mime_type == "image/png" and len(base64.b64decode(png.data)) == data_of(result)["png_bytes"]
    assert base64.b64decode(read.contents[0].blob) == base64.b64decode(png.data)
    by_path = {artifact["path"]: artifact for artifact in result["artifacts"]}
    assert set(links) == set(by_path) == {"chart.png", "summary.csv"}
    assert str(links["chart.png"].uri) == f"wasmexec://runs/{result['run_id']}/chart.png"
    assert links["chart.png"].size == by_path["chart.png"]["size"] and links["summary.csv"].mime_type == "text/csv"
    (csv,) = [block.resource for block in content if isinstance(block, EmbeddedResource)]
    assert isinstance(csv, TextResourceContents) and csv.text == "city,total\nOslo,3\n"
    assert {str(resource.uri) for resource in listed} >= {str(link.uri) for link in links.values()}


def test_an_unknown_resource_uri_is_invalid_params(runtime: Runtime, state: Path) -> None:
    async def body(client: Client) -> list[int]:
        codes = []
        for uri in ("wasmexec://runs/0123abcd/nothing.txt", "wasmexec://elsewhere/x", "file:///etc/passwd"):
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            codes.append(caught.value.code)
        return codes

    assert _stdio(runtime, state, "auto", body) == [-32602] * 3


def test_over_2025_http_another_client_can_neither_list_nor_read_an_artifact(http_url: str) -> None:
    async def body() -> Any:
        async with Client(http_url, mode="legacy") as owner, Client(http_url, mode="legacy") as other:
            _, content = await _call(owner, WRITE_PNG)
            uri = next(block.uri for block in content if isinstance(block, ResourceLink))
            mine = (await owner.list_resources()).resources
            theirs = (await other.list_resources()).resources
            with pytest.raises(MCPError) as caught:
                await other.read_resource(uri)
            return uri, mine, theirs, caught.value

    uri, mine, theirs, refused = _http(http_url, body)
    assert str(uri) in {str(resource.uri) for resource in mine}
    assert str(uri) not in {str(resource.uri) for resource in theirs}
    assert refused.code == -32602 and "Resource not found" in refused.message


# -- files in -------------------------------------------------------------------------------------


def test_input_files_as_text_and_base64_round_trip(runtime: Runtime, state: Path) -> None:
    blob = bytes(range(256))
    code = "result = [open('in/notes.txt', encoding='utf-8').read(), open('data.bin', 'rb').read().hex()]"

    async def body(client: Client) -> Any:
        files = [{"path": "in/notes.txt", "text": "héllo ✓"},
                 {"path": "data.bin", "base64": base64.b64encode(blob).decode()}]  # fmt: skip
        return await _call(client, code, files=files)

    result, _ = _stdio(runtime, state, "auto", body)
    assert data_of(result) == ["héllo ✓", blob.hex()]
    assert result["artifacts"] == []  # inputs the code did not change are not artifacts


def test_oversized_or_bad_input_files_are_refused_before_any_run(runtime: Runtime, state: Path) -> None:
    big = base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()

    async def body(client: Client) -> list[MCPError]:
        errors = []
        for files in ([{"path": "big.bin", "base64": big}], [{"path": "../escape", "text": "x"}],
                      [{"path": "a"}], [{"path": "a", "base64": "%%%"}]):  # fmt: skip
            with pytest.raises(MCPError) as caught:
                await client.call_tool("run_python", {"code": "result = 1", "files": files, "timeout_ms": 5000})
            errors.append(caught.value)
        return errors

    errors = _stdio(runtime, state, "auto", body, "--workspace-mb", "1")
    assert [error.code for error in errors] == [-32602] * 4
    messages = [error.message for error in errors]
    assert "files[0]: the input files take more than the 1048576 bytes allowed" in messages[0]
    assert "'..'" in messages[1] and "exactly one of 'text' and 'base64'" in messages[2]
    assert "not valid base64" in messages[3]


# -- sessions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_session_carries_files_but_not_variables_to_the_next_call(runtime: Runtime, state: Path, mode: str) -> None:
    async def body(client: Client) -> Any:
        first, content = await _call(client, "open('notes.txt', 'w').write('kept')\nx = 42\nresult = 1", session=True,
                                     files=[{"path": "given.txt", "text": "an input"}])  # fmt: skip
        session_id = first["session_id"]
        code = "result = [open('notes.txt').read(), open('given.txt').read(), 'x' in globals()]"
        second, _ = await _call(client, code, session_id=session_id)
        return first, content, second

    first, content, second = _stdio(runtime, state, mode, body)
    assert len(first["session_id"]) == 43 and first["session_id"] in content[0].text
    assert data_of(second) == ["kept", "an input", False] and second["session_id"] == first["session_id"]


_STATE_CLASS = "import dataclasses, pickle\n@dataclasses.dataclass\nclass State:\n    seen: list[str]\n"


def test_state_pickled_in_one_call_of_a_session_loads_in_the_next(runtime: Runtime, state: Path) -> None:
    # How agents keep state across calls: pickle to the session's /workspace, load in the next call
    # (the class the code defines lives in its __main__, so the next call defines it again).
    save = _STATE_CLASS + "pickle.dump(State(['first']), open('state.pkl', 'wb'))\nresult = 'saved'"
    load = _STATE_CLASS + "s = pickle.load(open('state.pkl', 'rb'))\ns.seen.append('second')\nresult = s.seen"

    async def body(client: Client) -> Any:
        first, _ = await _call(client, save, session=True)
        second, _ = await _call(client, load, session_id=first["session_id"])
        return first, second

    first, second = _stdio(runtime, state, "auto", body)
    assert data_of(first) == "saved"
    assert data_of(second) == ["first", "second"]


def test_skills_saved_in_a_session_import_in_its_later_runs(runtime: Runtime, state: Path) -> None:
    save = (
        "import os\nos.makedirs('skills', exist_ok=True)\n"
        "open('skills/fmt.py', 'w').write('def money(x):\\n    return f\"${x:,.2f}\"\\n')"
    )

    async def body(client: Client) -> Any:
        first, _ = await _call(client, save, session=True)
        second, _ = await _call(client, "import skills.fmt\nresult = skills.fmt.money(1234.5)",
                                session_id=first["session_id"])  # fmt: skip
        return second

    assert data_of(_stdio(runtime, state, "auto", body)) == "$1,234.50"


@pytest.mark.parametrize(
    ("stop", "options", "limit"),
    [
        ("import time\nopen('a.txt', 'w').write('half-')\nwhile True:\n    time.sleep(0.01)", {"timeout_ms": 1500},
         "timeout"),
        ("open('a.txt', 'w').write('half-')\nopen('b.bin', 'wb').write(b'x' * (2 * 1024 * 1024))", {},
         "workspace_bytes"),
    ],
)  # fmt: skip
def test_a_run_stopped_mid_write_loses_nothing_of_the_sessions_earlier_files(
    runtime: Runtime, state: Path, stop: str, options: dict[str, Any], limit: str
) -> None:
    async def body(client: Client) -> Any:
        first, _ = await _call(client, "open('a.txt', 'w').write('v1')\nopen('keep.txt', 'w').write('k')", session=True)
        stopped, _ = await _call(client, stop, session_id=first["session_id"], **options)
        after, _ = await _call(client, "import os\nresult = [open('a.txt').read(), sorted(os.listdir('.'))]",
                               session_id=first["session_id"])  # fmt: skip
        return stopped, after

    stopped, after = _stdio(runtime, state, "auto", body, "--workspace-mb", "1")
    assert limit_of(stopped) == limit
    assert diagnostic(stopped, "SESSION_UNCHANGED")["severity"] == "warning"
    assert data_of(after) == ["v1", ["a.txt", "keep.txt"]]


def test_an_expired_session_is_refused_and_its_directory_removed(runtime: Runtime, tmp_path: Path) -> None:
    async def body(client: Client) -> Any:
        first, _ = await _call(client, "open('a.txt', 'w').write('x')", session=True)
        directory = _sessions_dir(tmp_path) / first["session_id"]
        existed = directory.is_dir()
        await anyio.sleep(1.5)  # the TTL is 1 s: let it pass
        with pytest.raises(MCPError) as caught:
            await client.call_tool("run_python", {"code": "1", "session_id": first["session_id"]})
        return existed, directory, caught.value

    existed, directory, refused = _stdio(runtime, tmp_path, "auto", body, "--session-ttl", "1")
    assert existed and not directory.exists()
    assert refused.code == -32602 and "unknown or expired session_id" in refused.message


def test_over_2025_http_another_client_cannot_use_a_sessions_id(http_url: str) -> None:
    async def body() -> Any:
        async with Client(http_url, mode="legacy") as owner, Client(http_url, mode="legacy") as other:
            first, _ = await _call(owner, "open('secret.txt', 'w').write('mine')", session=True)
            with pytest.raises(MCPError) as caught:
                await other.call_tool("run_python", {"code": "open('secret.txt').read()",
                                                     "session_id": first["session_id"]})  # fmt: skip
            again, _ = await _call(owner, "result = open('secret.txt').read()", session_id=first["session_id"])
            return caught.value, again

    refused, again = _http(http_url, body)
    assert refused.code == -32602 and "unknown or expired session_id" in refused.message
    assert data_of(again) == "mine"


def test_over_2026_http_the_session_id_is_the_handle_and_travels_in_a_header(http_url: str) -> None:
    async def body() -> Any:
        async with Client(http_url, mode="auto") as first, Client(http_url, mode="auto") as second:
            assert first.protocol_version.startswith("2026")
            made, _ = await _call(first, "open('notes.txt', 'w').write('shared')", session=True)
            # The client mirrors session_id into Mcp-Param-Session-Id; the server refuses a call without it.
            used, _ = await _call(second, "result = open('notes.txt').read()", session_id=made["session_id"])
            return used

    assert data_of(_http(http_url, body)) == "shared"


def test_over_2026_http_a_session_id_header_that_does_not_match_the_argument_is_refused(http_url: str) -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
    arguments = {"code": "1", "session_id": "A" * 43}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "run_python", "arguments": arguments, "_meta": meta}}  # fmt: skip
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "run_python",
               "mcp-param-session-id": "B" * 43}  # fmt: skip
    reply = httpx2.post(http_url, content=json.dumps(message), headers=headers, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == -32020


def test_a_busy_session_refuses_a_second_run_with_a_retryable_error(runtime: Runtime, state: Path) -> None:
    async def body(client: Client) -> Any:
        first, _ = await _call(client, "open('a.txt', 'w').write('x')", session=True)
        running = anyio.Event()
        replies: list[Any] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            running.set()  # "running": the server has reserved the session for this call

        async def slow() -> None:
            arguments = {"code": "import time\ntime.sleep(3)", "session_id": first["session_id"]}
            reply = await client.call_tool("run_python", arguments, progress_callback=on_progress)
            replies.append(reply)

        async with anyio.create_task_group() as group:
            group.start_soon(slow)
            await running.wait()
            busy = await client.call_tool("run_python", {"code": "1", "session_id": first["session_id"]})
        return busy, replies

    busy, replies = _stdio(runtime, state, "auto", body)
    assert busy.is_error and "busy" in busy.content[0].text and "retry" in busy.content[0].text
    assert replies[0].structured_content["result"]["ok"]


def test_sessions_can_be_turned_off(runtime: Runtime, state: Path) -> None:
    async def body(client: Client) -> MCPError:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("run_python", {"code": "1", "session": True})
        return caught.value

    refused = _stdio(runtime, state, "auto", body, "--max-sessions", "0")
    assert refused.code == -32602 and "sessions are turned off" in refused.message


def test_serve_skills_mounts_a_read_only_directory_every_run_imports_from(runtime: Runtime, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "greet.py").write_text('"""Say hello."""\n\ndef hello(name):\n    return f"hello {name}"\n')
    code = """
from codemode import discovery
import skills.greet
try:
    open('/skills/mine.py', 'w').write('x = 1')
    wrote = True
except OSError:
    wrote = False
result = [skills.greet.hello('you'), discovery.list_skills(), wrote]
"""

    async def body(client: Client) -> Any:
        plain, _ = await _call(client, code)
        in_session, _ = await _call(client, code, session=True)
        return plain, in_session

    plain, in_session = _stdio(runtime, tmp_path, "auto", body, "--skills", str(skills))
    assert data_of(plain) == data_of(in_session) == ["hello you", [{"name": "greet", "doc": "Say hello."}], False]
    assert sorted(p.name for p in skills.iterdir()) == ["greet.py"]


def test_a_sessions_directory_that_cannot_be_made_turns_sessions_off_with_a_warning(
    runtime: Runtime, tmp_path: Path
) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    errors = tmp_path / "stderr.txt"

    async def body(client: Client) -> Any:
        plain, _ = await _call(client, "result = 1")
        with pytest.raises(MCPError) as caught:
            await client.call_tool("run_python", {"code": "1", "session": True})
        return plain, caught.value

    async def main() -> Any:
        with anyio.fail_after(120), errors.open("w") as errlog:
            async with Client(stdio_client(_params(runtime, blocker), errlog=errlog), mode="auto") as client:
                return await body(client)

    plain, refused = anyio.run(main)
    assert data_of(plain) == 1 and "sessions are turned off" in refused.message
    assert "warning: sessions are off: cannot use" in errors.read_text()


def test_an_input_file_a_sessions_file_is_in_the_way_of_is_refused_and_the_session_goes_on(
    runtime: Runtime, state: Path
) -> None:
    async def body(client: Client) -> Any:
        first, _ = await _call(client, "open('d', 'w').write('a file, not a directory')", session=True)
        with pytest.raises(MCPError) as caught:
            await client.call_tool("run_python", {"code": "1", "session_id": first["session_id"],
                                                  "files": [{"path": "d/x.txt", "text": "1"}]})  # fmt: skip
        after, _ = await _call(client, "result = open('d').read()", session_id=first["session_id"])
        return caught.value, after

    refused, after = _stdio(runtime, state, "auto", body)
    assert refused.code == -32602 and "cannot write 'd/x.txt'" in refused.message
    assert data_of(after) == "a file, not a directory"


def test_a_session_outlives_a_server_restart(runtime: Runtime, tmp_path: Path) -> None:
    async def first(client: Client) -> str:
        made, _ = await _call(client, "open('notes.txt', 'w').write('from the first server')", session=True)
        return str(made["session_id"])

    async def second(client: Client) -> Any:
        return (await _call(client, "result = open('notes.txt').read()", session_id=session_id))[0]

    session_id = _stdio(runtime, tmp_path, "auto", first)  # the client closes stdin: that server stops
    assert data_of(_stdio(runtime, tmp_path, "auto", second)) == "from the first server"
