"""A guest that forges its report gets a strict, truthful run result, and the run is always audited.

Agent code can replace anything inside the sandbox, the bridge's report included (here by patching
``json.dumps``, which the bridge uses to serialize it). Whatever the report says: every string in
the result is valid Unicode, every number finite, the output line is strict JSON on one line,
host-owned diagnostics and ``retryable`` come only from the host, and a ``run`` line reaches the
audit log, even when building the result itself fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import data_of, diagnostic, error_of, limit_of
from tests.security._support import forge_report, profile_of, run
from wasmexec import Limits, Redactor, Runtime, Sandbox, validate_run_result
from wasmexec._audit import AuditLog
from wasmexec._envelope import result_json

#: Diagnostic codes only the host may emit.
HOST_CODES = ["SANDBOX_LIMIT", "TOOLS_UNAVAILABLE", "LOGS_TRUNCATED", "BLOCKING_WAIT", "SANDBOX_TRAP",
              "INTERNAL_ERROR"]  # fmt: skip
LINE_BREAKS = ["\u2028", "\u2029", "\x85"]


def _forge(report: dict[str, Any] | str) -> str:
    """Guest code that makes the bridge send `report` (ASCII JSON text) instead of its real report."""
    return forge_report(report if isinstance(report, str) else json.dumps(report))


def _strict_loads(line: str) -> Any:
    """json.loads that refuses what strict parsers refuse: NaN, infinities, lone surrogates."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not strict JSON: {constant}")

    value = json.loads(line, parse_constant=refuse)
    _check_strings(value)
    return value


def _check_strings(value: Any) -> None:
    if isinstance(value, str):
        value.encode("utf-8")  # raises on a lone surrogate
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)
    elif isinstance(value, float):
        assert value == value and value not in (float("inf"), float("-inf")), value


def assert_strict(result: Any) -> str:
    """The result fits its schema, encodes as one strict JSON line, and the MCP server can send it."""
    from mcp.types import CallToolResult

    validate_run_result(result)
    line = result_json(result)
    assert line.splitlines() == [line], "the line must not split"
    assert not any(separator in line for separator in LINE_BREAKS)
    assert _strict_loads(line) == json.loads(line)
    line.encode("utf-8")
    _strict_loads(CallToolResult(content=[], structured_content=dict(result)).model_dump_json())
    return line


# -- strings and numbers ---------------------------------------------------------------------------


def test_a_forged_lone_surrogate_in_the_data_becomes_a_replacement_character(runtime: Runtime) -> None:
    data_json = json.dumps({"text": "a\ud800b", "\udc00key": ["\udfff"]})
    result = run(runtime, _forge({"ok": True, "data_json": data_json, "diagnostics": []}))
    assert data_of(result) == {"text": "a\ufffdb", "\ufffdkey": ["\ufffd"]}
    assert_strict(result)


def test_a_forged_surrogate_pair_in_the_data_is_kept_as_the_character_it_encodes(runtime: Runtime) -> None:
    result = run(runtime, _forge({"ok": True, "data_json": '"\\ud83d\\ude00"', "diagnostics": []}))
    assert data_of(result) == "\U0001f600"


def test_forged_lone_surrogates_in_the_error_and_diagnostics_are_replaced(runtime: Runtime) -> None:
    diagnostic_ = {"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "m\ud800", "hint": "h\udbff",
                   "path": "\udc00", "error_class": "E\ud800",
                   "frames": [{"line": 1, "function": "f\ud800", "text": "t\udfff"}]}  # fmt: skip
    report = {"ok": False, "error": {"type": "Boom\ud800", "message": "bad \udfff"}, "diagnostics": [diagnostic_]}
    result = run(runtime, _forge(report))
    assert error_of(result)["type"] == "Boom\ufffd" and error_of(result)["message"] == "bad \ufffd"
    found = diagnostic(result, "UNCAUGHT_EXCEPTION")
    assert found["message"] == "m\ufffd" and found["frames"][0]["function"] == "f\ufffd"
    assert_strict(result)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_a_forged_non_finite_number_in_the_data_is_refused(runtime: Runtime, number: str) -> None:
    result = run(runtime, _forge({"ok": True, "data_json": f"[1, {number}]", "diagnostics": []}))
    error = error_of(result)
    assert error["type"] == "SandboxError" and "not strict JSON" in error["message"]
    assert_strict(result)


@pytest.mark.parametrize("separator", LINE_BREAKS, ids=["U+2028", "U+2029", "U+0085"])
def test_line_separators_in_data_and_logs_are_escaped_on_the_output_line(runtime: Runtime, separator: str) -> None:
    code = f"print('a{separator}b')\nresult = {{'k{separator}': 'v{separator}'}}"
    result = run(runtime, code)
    assert data_of(result) == {f"k{separator}": f"v{separator}"}
    assert result["logs"][0]["message"] == f"a{separator}b"
    line = assert_strict(result)
    assert f"\\u{ord(separator):04x}" in line
    assert json.loads(line) == result


def test_forged_separators_in_the_report_are_escaped_too(runtime: Runtime) -> None:
    report = {"ok": False, "error": {"type": "E", "message": "\u2028\u2029\x85"},
              "diagnostics": [{"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "\u2028"}]}  # fmt: skip
    assert_strict(run(runtime, _forge(report)))


# -- host-owned fields ----------------------------------------------------------------------------


@pytest.mark.parametrize("code", [*HOST_CODES, "RESULT_TOO_DEEP", "MADE_UP_CODE"])
def test_a_forged_diagnostic_with_a_code_the_guest_does_not_own_is_dropped(runtime: Runtime, code: str) -> None:
    forged = {"severity": "warning", "code": code, "message": "the host said so", "limit": "fuel"}
    result = run(runtime, _forge({"ok": True, "data_json": "1", "diagnostics": [forged]}))
    assert data_of(result) == 1
    assert result["diagnostics"] == []


def test_a_forged_limit_field_on_a_guest_diagnostic_is_dropped(runtime: Runtime) -> None:
    forged = {"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "m", "limit": "timeout"}
    result = run(runtime, _forge({"ok": False, "error": {"type": "E", "message": "m"}, "diagnostics": [forged]}))
    assert "limit" not in diagnostic(result, "UNCAUGHT_EXCEPTION")


@pytest.mark.parametrize("limit", ["timeout", "fuel", "stack", "cancelled", "tool_calls", "result_depth"])
def test_a_forged_sandbox_limit_the_host_never_saw_is_reported_as_an_uncaught_exception(
    runtime: Runtime, limit: str
) -> None:
    forged = {"severity": "error", "code": "SANDBOX_LIMIT", "message": f"{limit} fired", "limit": limit,
              "error_class": "SandboxLimitError"}  # fmt: skip
    report = {"ok": False, "error": {"type": "SandboxLimitError", "message": f"{limit} fired", "retryable": True},
              "diagnostics": [forged]}  # fmt: skip
    result = run(runtime, _forge(report))
    assert error_of(result) == {"type": "SandboxLimitError", "message": f"{limit} fired", "retryable": False}
    assert [d["code"] for d in result["diagnostics"]] == ["UNCAUGHT_EXCEPTION"]
    assert "limit" not in result["diagnostics"][0]


def test_a_forged_retryable_error_is_not_retryable(runtime: Runtime) -> None:
    report = {"ok": False, "error": {"type": "ValueError", "message": "x", "retryable": True}, "diagnostics": []}
    assert error_of(run(runtime, _forge(report)))["retryable"] is False


def test_a_tool_call_limit_the_host_enforced_stays_a_sandbox_limit(runtime: Runtime) -> None:
    code = "from codemode import _host\n_host.start_call('server', 'tool', {})"
    result = run(runtime, code, max_tool_calls=0)
    assert limit_of(result) == "tool_calls"
    assert error_of(result)["retryable"] is False


# -- the audit trail ------------------------------------------------------------------------------


class _ExplodingRedactor(Redactor):
    """A redactor with a bug: building any result with it fails."""

    def redact(self, value: Any) -> tuple[Any, int]:
        raise RuntimeError("redactor bug")


def _run_lines(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line["kind"] == "run"]


def test_a_failure_while_building_the_result_gives_a_structured_host_error_and_is_audited(
    runtime: Runtime, tmp_path: Path
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    sandbox = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, redactor=_ExplodingRedactor(), audit=audit)
    result = sandbox.run_sync("print('secret-ish output')\nresult = 1")
    error = error_of(result)
    assert error["type"] == "SandboxError" and "internal host error" in error["message"]
    assert error["retryable"] is False
    assert diagnostic(result, "INTERNAL_ERROR")["severity"] == "error"
    assert result["logs"] == []  # nothing unredacted leaves a broken host
    assert_strict(result)
    (line,) = _run_lines(tmp_path / "audit.jsonl")
    assert line["run_id"] == result["run_id"] and line["outcome"] == "SandboxError"


@pytest.mark.parametrize(
    "report",
    [
        {"ok": True, "data_json": json.dumps("\ud800"), "diagnostics": []},
        {"ok": True, "data_json": "NaN", "diagnostics": []},
        {"ok": False, "error": {"type": "\ud800", "message": "\udfff"}, "diagnostics": []},
    ],
    ids=["surrogate-data", "nan-data", "surrogate-error"],
)
def test_every_forged_report_is_audited_through_the_python_api(
    runtime: Runtime, tmp_path: Path, report: dict[str, Any]
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    result = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, audit=audit).run_sync(_forge(report))
    (line,) = _run_lines(tmp_path / "audit.jsonl")
    assert line["run_id"] == result["run_id"]
    line_text = (tmp_path / "audit.jsonl").read_bytes().decode("utf-8")  # strict UTF-8
    _strict_loads(line_text.splitlines()[-1])


def _cli(runtime: Runtime, tmp_path: Path, code: str) -> subprocess.CompletedProcess[bytes]:
    env = {key: value for key, value in os.environ.items() if key != "WASMEXEC_CONFIG"}
    env["WASMEXEC_CACHE_DIR"] = str(runtime.artifacts.directory)
    profile = ["--profile", profile_of(runtime)]
    return subprocess.run(
        [sys.executable, "-m", "wasmexec", "run", *profile, "--audit-log", str(tmp_path / "audit.jsonl"), "-c", code],
        capture_output=True, timeout=120, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "report",
    [
        {"ok": True, "data_json": json.dumps({"\ud800": "\udfff"}), "diagnostics": []},
        {"ok": True, "data_json": "[NaN, Infinity, -Infinity]", "diagnostics": []},
        {"ok": False, "error": {"type": "E", "message": "\ud800"},
         "diagnostics": [{"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "\udfff"}]},
    ],
    ids=["surrogate-data", "nan-data", "surrogate-diagnostic"],
)  # fmt: skip
def test_the_cli_prints_one_strict_json_line_for_a_forged_report_and_audits_it(
    runtime: Runtime, tmp_path: Path, report: dict[str, Any]
) -> None:
    done = _cli(runtime, tmp_path, _forge(report))
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    assert done.returncode in (0, 1), done.stderr
    text = done.stdout.decode("utf-8")  # strict UTF-8
    lines = text.splitlines()
    assert len(lines) == 1, text
    result = _strict_loads(lines[0])
    validate_run_result(result)
    (line,) = _run_lines(tmp_path / "audit.jsonl")
    assert line["run_id"] == result["run_id"]


def test_the_cli_line_escapes_line_separators(runtime: Runtime, tmp_path: Path) -> None:
    done = _cli(runtime, tmp_path, "print('a\\u2028b\\x85c')\nresult = '\\u2029'")
    text = done.stdout.decode("utf-8")
    assert text.endswith("\n") and text.splitlines() == [text[:-1]]


def test_wasmexec_serve_answers_forged_reports_with_strict_structured_results(runtime: Runtime) -> None:
    reports = [
        {"ok": True, "data_json": json.dumps({"\ud800": "\udfff\u2028"}), "diagnostics": []},
        {"ok": True, "data_json": "[NaN, Infinity]", "diagnostics": []},
        {"ok": False, "error": {"type": "\ud800", "message": "m", "retryable": True},
         "diagnostics": [{"severity": "error", "code": "TOOLS_UNAVAILABLE", "message": "\udfff"}]},
    ]  # fmt: skip
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--profile", profile_of(runtime), "--no-audit"],
        env={"WASMEXEC_CACHE_DIR": str(runtime.artifacts.directory), "PATH": os.environ["PATH"]},
    )

    async def main() -> list[Any]:
        answers = []
        async with Client(params) as client:
            for report in reports:
                with anyio.fail_after(60):
                    answers.append(await client.call_tool("run_python", {"code": _forge(report)}))
        return answers

    first, second, third = anyio.run(main)
    for answer in (first, second, third):
        assert not answer.is_error, answer
        assert_strict(answer.structured_content)
    assert data_of(first.structured_content) == {"\ufffd": "\ufffd\u2028"}
    assert error_of(second.structured_content)["type"] == "SandboxError"
    assert error_of(third.structured_content) == {"type": "\ufffd", "message": "m", "retryable": False}
    assert third.structured_content["diagnostics"] == []
