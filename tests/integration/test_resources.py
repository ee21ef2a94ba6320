"""Upstream MCP resources from sandbox code: list, templates and read, through the broker's policy and audit.

Against the npm reference server `server-everything` (static documents, text and blob
templates) and a Python test server that offers no resources.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import data_of, error_of
from tests.integration.conftest import NODE_BIN, SERVERS
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._audit import AuditLog
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config
from wasmexec._tools.policy import Policy

EVERYTHING = {"command": str(NODE_BIN / "mcp-server-everything"), "args": ["stdio"]}
AWKWARD = {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]}  # a lowlevel Server: no resources


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("resources") / "audit.jsonl"


@pytest.fixture(scope="module")
def resource_broker(tmp_path_factory: pytest.TempPathFactory, audit_path: Path) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("resource-broker")
    config = parse_config({"mcpServers": {"everything": EVERYTHING, "awkward": AWKWARD}})
    with (tmp / "servers.log").open("w") as errlog, Broker(
        config, errlog=errlog, audit=AuditLog(audit_path), warn=lambda message: None
    ) as broker:  # fmt: skip
        yield broker


@pytest.fixture
def sandbox(runtime: Runtime, resource_broker: Broker) -> Sandbox:
    return Sandbox(Limits(timeout_ms=30_000), runtime=runtime, tools=resource_broker)


def test_code_lists_reads_and_templates_resources_concurrently(sandbox: Sandbox, audit_path: Path) -> None:
    code = """
import asyncio
import servers.everything as ev
listed = await ev.resources.list()
uris = [r["uri"] for r in listed if r["uri"].endswith((".md",))][:2]
texts = await asyncio.gather(*(ev.resources.read(uri) for uri in uris))
templates = await ev.resources.templates()
blob = await ev.resources.read("demo://resource/dynamic/blob/7")
result = {"uris": uris, "heads": [t.splitlines()[0] for t in texts], "templates": [t["uriTemplate"] for t in templates],
          "blob": [sorted(c) for c in blob], "repr": repr(ev.resources)}
"""
    result = sandbox.run_sync(code)
    data = data_of(result)
    assert len(data["uris"]) == 2 and all(head.startswith("#") for head in data["heads"])
    assert "demo://resource/dynamic/text/{resourceId}" in data["templates"]
    assert data["blob"] == [["blob", "mimeType", "uri"]]
    assert data["repr"] == "<resources of MCP server 'everything'>"
    names = [entry["tool_name"] for entry in result["tool_trace"]]
    assert names == ["resources/list", "resources/read", "resources/read", "resources/templates/list", "resources/read"]
    audited = [json.loads(line) for line in audit_path.read_text().splitlines()]
    reads = [line for line in audited if line.get("tool") == "resources/read" and line["run_id"] == result["run_id"]]
    assert len(reads) == 3 and all(line["outcome"] == "ok" and line["argument_digest"] for line in reads)
    assert "demo://" not in audit_path.read_text()  # digests only


def test_resource_calls_count_against_the_tool_call_limit(sandbox: Sandbox) -> None:
    code = "import servers.everything as ev\nfor _ in range(3):\n    await ev.resources.list()"
    result = sandbox.run_sync(code, Limits(timeout_ms=30_000, max_tool_calls=2))
    assert error_of(result)["type"] == "SandboxLimitError"


def test_bad_uris_are_refused_before_the_server_sees_them(sandbox: Sandbox) -> None:
    code = """
import servers.everything as ev
from codemode.errors import CodemodeError
outcomes = []
for uri in (42, "", "x" * 10_000):
    try:
        await ev.resources.read(uri)
    except (TypeError, CodemodeError) as exc:
        outcomes.append(type(exc).__name__)
result = outcomes
"""
    assert data_of(sandbox.run_sync(code)) == ["TypeError", "SchemaValidationError", "SchemaValidationError"]


def test_a_server_without_resources_says_so(sandbox: Sandbox) -> None:
    code = """
import servers.awkward as aw
from codemode.errors import CodemodeError
try:
    await aw.resources.list()
except CodemodeError as exc:
    result = [type(exc).__name__, str(exc)]
"""
    kind, message = data_of(sandbox.run_sync(code))
    assert kind == "ToolNotFoundError" and "awkward" in message


def test_policy_globs_cover_resources(runtime: Runtime, tmp_path: Path) -> None:
    config = parse_config({"mcpServers": {"everything": EVERYTHING}})
    policy = Policy(deny=("*.resources/read",))
    with (tmp_path / "servers.log").open("w") as errlog, Broker(
        config, policy=policy, errlog=errlog, warn=lambda message: None
    ) as broker:  # fmt: skip
        sandbox = Sandbox(Limits(timeout_ms=30_000), runtime=runtime, tools=broker)
        code = """
import servers.everything as ev
from codemode.errors import ApprovalDeniedError
listed = await ev.resources.list()
try:
    await ev.resources.read(listed[0]["uri"])
    denied = None
except ApprovalDeniedError as exc:
    denied = str(exc)
result = [len(listed), denied]
"""
        count, denied = data_of(sandbox.run_sync(code))
    assert count > 0 and "everything.resources/read is not allowed" in denied
