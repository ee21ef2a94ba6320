"""Resource operations through the broker against an in-process server: policy, approval, trace, audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp.server import MCPServer

from tests.unit.test_broker import _audit, _broker, _in_process, _run
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import CallKind, HostCallError
from wasmexec._tools.policy import Policy
from wasmexec._tools.upstream_resources import read_answer


def _resource_server() -> MCPServer:
    server = MCPServer("docs", version="1.0.0", log_level="WARNING")

    @server.resource("docs://readme", name="readme", mime_type="text/markdown")
    def readme() -> str:
        return "# Read me"

    @server.resource("docs://pages/{page}", name="page")
    def page(page: str) -> str:
        return f"page {page}"

    return server


def _ask(run: RunState, kind: CallKind, arguments: dict[str, Any]) -> str | HostCallError:
    run.tool_calls += 1
    handle = run.next_handle()
    run.reserve(handle, len(json.dumps(arguments)))
    try:
        run.tools.start_call(run, handle, "tools", "", arguments, kind=kind)
    except HostCallError as error:
        return error
    [(_, outcome)] = run.wait([handle], 20)
    return outcome


def test_resources_are_listed_read_traced_and_audited_like_tool_calls(tmp_path: Path) -> None:
    with _broker(tmp_path, factory=_in_process({"tools": _resource_server()})) as broker:
        run = _run(broker)
        listed = json.loads(str(_ask(run, "list-resources", {})))
        templates = json.loads(str(_ask(run, "list-resource-templates", {})))
        text = json.loads(str(_ask(run, "read-resource", {"uri": "docs://readme"})))
        page = json.loads(str(_ask(run, "read-resource", {"uri": "docs://pages/7"})))
        refused = _ask(run, "read-resource", {"uri": 7})
        run.finish()
    assert [r["uri"] for r in listed] == ["docs://readme"] and listed[0]["mimeType"] == "text/markdown"
    assert [t["uriTemplate"] for t in templates] == ["docs://pages/{page}"]
    assert text == "# Read me" and page == "page 7"
    assert isinstance(refused, HostCallError) and refused.kind == "invalid-argument"
    assert [e["tool_name"] for e in run.tool_trace] == [
        "resources/list", "resources/templates/list", "resources/read", "resources/read", "resources/read"]  # fmt: skip
    assert [line["outcome"] for line in _audit(tmp_path)] == ["ok"] * 4 + ["invalid-argument"]


def test_policy_globs_deny_or_ask_before_resource_operations(tmp_path: Path) -> None:
    asked: list[str] = []

    def approver(request: dict[str, Any]) -> bool:
        asked.append(request["question"])
        return False

    policy = Policy(deny=("tools.resources/list",), require_approval=("tools.resources.read",))
    with _broker(tmp_path, policy=policy, factory=_in_process({"tools": _resource_server()})) as broker:
        run = _run(broker, approver=approver)
        listed = _ask(run, "list-resources", {})
        read = _ask(run, "read-resource", {"uri": "docs://readme"})
        templates = _ask(run, "list-resource-templates", {})
        run.finish()
    assert isinstance(listed, HostCallError) and listed.kind == "denied"
    assert isinstance(read, HostCallError) and read.kind == "denied" and "docs://readme" in asked[0]
    assert isinstance(templates, str)


def test_a_lone_text_content_is_its_text_and_anything_else_the_contents() -> None:
    assert read_answer([{"uri": "a", "text": "hi"}]) == "hi"
    blob = [{"uri": "a", "blob": "AAAA", "mimeType": "image/png"}]
    assert read_answer(blob) == blob
    two = [{"uri": "a", "text": "x"}, {"uri": "b", "text": "y"}]
    assert read_answer(two) == two


def test_a_policy_glob_naming_a_resource_operation_is_not_reported_as_matching_nothing(tmp_path: Path) -> None:
    warnings: list[str] = []
    policy = Policy(deny=("tools.resources/read", "tools.resources.nothing"))
    with _broker(tmp_path, policy=policy, warnings=warnings,
                 factory=_in_process({"tools": _resource_server()})) as broker:  # fmt: skip
        broker.catalog(_run(broker), "list_tools", {"server_id": "tools"})
    assert warnings == ["policy deny glob 'tools.resources.nothing' matches no tool of the configured servers"]
