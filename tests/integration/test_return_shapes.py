"""Return shapes, raw results, retryable errors and policy in discovery, against real MCP servers.

The npm filesystem, memory and everything servers and the Python test servers run as
subprocesses; the sandbox is the real component.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import data_of, error_of
from tests.integration.conftest import NODE_BIN, SERVERS
from tests.unit.test_broker import _wait_until
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config
from wasmexec._tools.policy import Policy


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    for name, text in (("a.txt", "alpha\n"), ("b.txt", "beta\n")):
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def shapes_broker(tmp_path_factory: pytest.TempPathFactory, files: Path) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("shapes")
    config = parse_config({"mcpServers": {
        "filesystem": {"command": str(NODE_BIN / "mcp-server-filesystem"), "args": [str(files)]},
        "memory": {"command": str(NODE_BIN / "mcp-server-memory"), "env": {"MEMORY_FILE_PATH": str(tmp / "m.jsonl")}},
        "everything": {"command": str(NODE_BIN / "mcp-server-everything"), "args": ["stdio"]},
        "awkward": {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]},
        "crashy": {"command": sys.executable, "args": [str(SERVERS / "crashy.py")]},
        "missing": {"command": str(tmp / "no-such-server")},
    }})  # fmt: skip
    policy = Policy(deny=("everything.get_env",), require_approval=("memory.delete_*",))
    with (tmp / "servers.log").open("w") as errlog, Broker(
        config, cache_path=tmp / "schemas.json", errlog=errlog, policy=policy, warn=lambda message: None
    ) as broker:  # fmt: skip
        yield broker


@pytest.fixture
def sandbox(runtime: Runtime, shapes_broker: Broker) -> Sandbox:
    return Sandbox(Limits(timeout_ms=30_000), runtime=runtime, tools=shapes_broker, redactor=shapes_broker.redactor)


def test_help_and_the_signature_show_the_output_typeddict_of_a_tool_with_an_output_schema(sandbox: Sandbox) -> None:
    code = """
import inspect, pydoc
import servers.filesystem as fs
from codemode import discovery
tool = discovery.get_tool("filesystem", "read_text_file")
result = {"annotation": inspect.signature(fs.read_text_file).return_annotation,
          "help": pydoc.render_doc(fs.read_text_file, renderer=pydoc.plaintext),
          "typed_dicts": tool["typed_dicts"], "return_type": tool["return_type"], "signature": tool["signature"]}
"""
    data = data_of(sandbox.run_sync(code))
    assert data["annotation"] == data["return_type"] == "ReadTextFileResult"
    assert data["signature"].endswith("-> ReadTextFileResult")
    assert "class ReadTextFileResult(TypedDict):\n    content: str" in data["typed_dicts"]
    assert "-> ReadTextFileResult" in data["help"] and "class ReadTextFileResult(TypedDict):" in data["help"]
    assert "content: str" in data["help"]


def test_a_tool_without_an_output_schema_shows_what_its_results_looked_like(
    sandbox: Sandbox, shapes_broker: Broker
) -> None:
    calls = """
import servers.memory as mem
import servers.everything as ev
await mem.create_entities(entities=[{"name": "Ada", "entityType": "person", "observations": ["wrote code"]}])
result = [await mem.read_graph(), await ev.echo(message="hi")]
"""
    graph, echo = data_of(sandbox.run_sync(calls))
    assert graph["entities"][0]["name"] == "Ada" and echo == "Echo: hi"

    def observed(server: str, tool: str) -> bool:
        catalog = shapes_broker.catalog_for()
        entry = catalog.tool(server, tool)
        return catalog.observed_returns(entry) is not None

    _wait_until(lambda: observed("everything", "echo"))  # shapes are stored beside the answers
    code = """
import pydoc
import servers.everything as ev
from codemode import discovery
echo = discovery.get_tool("everything", "echo")
result = {"echo": echo.get("observed_returns"), "help": pydoc.render_doc(ev.echo, renderer=pydoc.plaintext),
          "graph": discovery.get_tool("memory", "read_graph").get("observed_returns"),
          "graph_schema": discovery.get_tool("memory", "read_graph")["output_schema"]}
"""
    data = data_of(sandbox.run_sync(code))
    assert data["echo"] == {"return_type": "str", "typed_dicts": ""}
    assert "str (observed in earlier results; the tool has no output schema)" in data["help"]
    assert data["graph_schema"] is not None and data["graph"] is None  # described by its schema, not observed


def test_raw_true_returns_the_whole_result_and_does_not_raise_on_is_error(sandbox: Sandbox) -> None:
    code = """
import servers.everything as ev
import servers.awkward as aw
result = [await ev.echo(message="hi", raw=True), await aw.error_result(raw=True),
          await aw.structured_output(a=2, b=3, raw=True)]
"""
    echo, error, structured = data_of(sandbox.run_sync(code))
    assert echo["content"] == [{"type": "text", "text": "Echo: hi"}] and echo["isError"] is False
    assert error["isError"] is True and error["content"][0]["type"] == "text"
    assert structured["structuredContent"]["sum"] == 5 and structured["content"]


def test_errors_are_retryable_for_unavailable_servers_and_not_for_bad_arguments(sandbox: Sandbox) -> None:
    code = """
from codemode.errors import CodemodeError
import servers.crashy as c
import servers.filesystem as fs
outcomes = {}
for name, call in (("crash", lambda: c.crash()), ("bad_arguments", lambda: fs.read_text_file(path=3)),
                   ("outside", lambda: fs.read_text_file(path="/etc/passwd"))):
    try:
        await call()
    except CodemodeError as exc:
        outcomes[name] = [type(exc).__name__, exc.retryable]
try:
    import servers.missing
except CodemodeError as exc:
    outcomes["missing"] = [type(exc).__name__, exc.retryable]
result = outcomes
"""
    data = data_of(sandbox.run_sync(code))
    assert data["crash"] == ["ToolCallError", True]
    assert data["missing"] == ["ToolCallError", False]  # its command does not exist: trying again changes nothing
    assert data["bad_arguments"] == ["SchemaValidationError", False]
    assert data["outside"] == ["ToolCallError", False]  # the tool's own error: trying again changes nothing


def test_discovery_leaves_denied_tools_out_and_says_which_need_approval(sandbox: Sandbox) -> None:
    code = """
from codemode import discovery
from codemode.errors import ApprovalDeniedError
import servers.everything as ev
import servers.memory as mem
listed = [t["tool_name"] for t in discovery.list_tools("everything", detail="name")]
found = [r["tool_name"] for r in discovery.search_tools("environment variables", server_id="everything")["results"]]
try:
    await ev.get_env()
    denied = None
except ApprovalDeniedError as exc:
    denied = str(exc)
memory = {t["tool_name"]: t["needs_approval"] for t in discovery.list_tools("memory")}
result = {"listed": listed, "found": found, "denied": denied, "memory": memory, "in_module": "get_env" in dir(ev),
          "doc": mem.delete_entities.__doc__}
"""
    result = sandbox.run_sync(code)
    data = data_of(result)
    (attempt,) = result["tool_trace"]  # calling a denied tool is an attempt: traced (and audited), refused
    assert attempt["ok"] is False and attempt["error"].startswith("denied:")
    assert "get-env" not in data["listed"] and "echo" in data["listed"]
    assert "get-env" not in data["found"] and not data["in_module"]
    assert data["denied"] and "not allowed by the host's policy" in data["denied"]
    assert data["memory"]["delete_entities"] is True and data["memory"]["read_graph"] is False
    assert "Needs approval" in data["doc"]


def test_a_run_that_ends_on_an_unavailable_server_is_retryable_and_one_that_ends_on_bad_arguments_is_not(
    sandbox: Sandbox,
) -> None:
    crashed = sandbox.run_sync("import servers.crashy as c\nawait c.crash()")
    assert error_of(crashed)["type"] == "ToolCallError" and error_of(crashed)["retryable"] is True
    bad = sandbox.run_sync("import servers.filesystem as fs\nawait fs.read_text_file(path=3)")
    assert error_of(bad)["type"] == "SchemaValidationError" and error_of(bad)["retryable"] is False
    # The guest's word is not enough: a ToolCallError raised by the code itself, after no failed call, is not.
    forged = sandbox.run_sync("from codemode.errors import ToolCallError\nraise ToolCallError('unavailable')")
    assert error_of(forged)["retryable"] is False
