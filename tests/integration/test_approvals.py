"""Approvals as a user meets them: the sandboxed code calls a tool that needs approval, the host asks.

A real component, a real MCP server (tests/servers/awkward.py: `delete_item` is destructive,
`echo_args` takes any object and answers what it received) and an approver callback that
records what the user was shown and answers.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers import data_of, error_of
from tests.integration.conftest import SERVERS
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._audit import AuditLog
from wasmexec._tools.approval import MAX_QUESTION_CHARS
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config
from wasmexec._tools.policy import Policy

ECHO = Policy(require_approval=("awkward-names.echo_args",))


@contextmanager
def _sandbox(runtime: Runtime, tmp_path: Path, policy: Policy = ECHO) -> Iterator[Sandbox]:
    config = parse_config({"mcpServers": {"awkward-names": {"command": sys.executable,
                                                            "args": [str(SERVERS / "awkward.py")]}}})  # fmt: skip
    with (tmp_path / "servers.log").open("a") as errlog, Broker(
        config, policy=policy, audit=AuditLog(tmp_path / "audit.jsonl"), errlog=errlog, warn=lambda m: None
    ) as broker:  # fmt: skip
        yield Sandbox(Limits(timeout_ms=20_000), runtime=runtime, tools=broker, redactor=broker.redactor)


class Approver:
    """Answers every question with `answer` and keeps the requests it was shown."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> bool:
        self.requests.append(request)
        return self.answer


def _tool_calls(tmp_path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    return [line for line in lines if line["kind"] == "tool_call"]


def test_the_user_sees_every_argument_even_one_padded_out_of_view(runtime: Runtime, tmp_path: Path) -> None:
    # The attack: a long run of spaces after the first path pushed the second one past a 500-character cut.
    code = """
import servers.awkward_names as aw
await aw.echo_args(paths=["scratch/cache" + " " * 600, "home/user/documents"])
"""
    approver = Approver(False)
    with _sandbox(runtime, tmp_path) as sandbox:
        result = sandbox.run_sync(code, approver=approver)
    assert error_of(result)["type"] == "ApprovalDeniedError" and result["approval_state"] == "DENIED"
    (request,) = approver.requests
    question = request["question"]
    assert "home/user/documents" in question and "awkward-names.echo_args" in question
    assert question.index("scratch/cache") < question.index("home/user/documents")


def test_a_right_to_left_override_is_shown_escaped_not_obeyed(runtime: Runtime, tmp_path: Path) -> None:
    code = "import servers.awkward_names as aw\nawait aw.echo_args(name='invoice\\u202egpj.exe')"
    approver = Approver(True)
    with _sandbox(runtime, tmp_path) as sandbox:
        result = sandbox.run_sync(code, approver=approver)
    assert json.loads(data_of(result)) == {"name": "invoice\u202egpj.exe"}  # approved: the call went through
    question = approver.requests[0]["question"]
    assert "\u202e" not in question and "invoice\\u202egpj.exe" in question
    assert result["approval_state"] == "APPROVED"


def test_a_call_too_large_to_show_is_refused_with_the_reason_and_nobody_is_asked(
    runtime: Runtime, tmp_path: Path
) -> None:
    code = f"import servers.awkward_names as aw\nawait aw.echo_args(data='d' * {MAX_QUESTION_CHARS})"
    approver = Approver(True)
    with _sandbox(runtime, tmp_path) as sandbox:
        result = sandbox.run_sync(code, approver=approver)
    error = error_of(result)
    assert error["type"] == "ApprovalDeniedError" and "too large to show" in error["message"]
    assert approver.requests == [] and result["approval_state"] == "DENIED"
    assert result["tool_trace"][0]["ok"] is False
    assert [line["approval"] for line in _tool_calls(tmp_path)] == ["too_large_to_show"]


def test_a_pre_approved_call_is_reported_approved_in_the_result_and_the_audit(runtime: Runtime, tmp_path: Path) -> None:
    code = "import servers.awkward_names as aw\nawait aw.delete_item(item_id='7')"
    approver = Approver(False)
    policy = Policy(pre_approved=("awkward-names.delete_*",))
    with _sandbox(runtime, tmp_path, policy) as sandbox:
        result = sandbox.run_sync(code, approver=approver)
    assert data_of(result) == 'delete_item {"item_id":"7"}'
    assert approver.requests == [] and result["approval_state"] == "APPROVED"
    (line,) = _tool_calls(tmp_path)
    assert line["approval"] == "pre_approved" and line["outcome"] == "ok"


def test_approval_globs_on_python_names_ask_before_the_call(runtime: Runtime, tmp_path: Path) -> None:
    code = "import servers.awkward_names as aw\nawait aw.fetch_http_response(url='https://example.com/')"
    approver = Approver(False)
    policy = Policy(require_approval=("awkward_names.fetch_http_*",))  # the module and function `tools list` shows
    with _sandbox(runtime, tmp_path, policy) as sandbox:
        result = sandbox.run_sync(code, approver=approver)
    assert error_of(result)["type"] == "ApprovalDeniedError"
    assert [request["tool_name"] for request in approver.requests] == ["fetch_HTTPResponse"]
