"""The guest's report is untrusted: whatever it says, the parsed report fits the contract."""

import json

import pytest

from wasmexec._sandbox.report import MAX_DIAGNOSTICS, parse_report


def test_a_good_report_is_taken_as_is() -> None:
    text = json.dumps({"ok": True, "data_json": '{"a": 1}', "diagnostics": [
        {"severity": "warning", "code": "RESULT_NOT_JSON", "message": "m", "hint": "h", "line": 3}]})  # fmt: skip
    report = parse_report(text, 1000)
    assert report.ok and report.data == {"a": 1}
    assert report.diagnostics == [{"severity": "warning", "code": "RESULT_NOT_JSON", "message": "m", "hint": "h",
                                   "line": 3}]  # fmt: skip


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"ok": "yes"}', '{"ok": true, "data_json": 5}', '{"ok": true, "data_json": "{bad"}',
     '{"ok": true, "data_json": "' + "[" * 100_000 + '"}'],
)  # fmt: skip
def test_an_unusable_report_becomes_a_sandbox_error(text: str) -> None:
    report = parse_report(text, 10_000_000)
    assert not report.ok and report.error is not None and report.error["type"] == "SandboxError"


def test_the_result_size_is_enforced_on_the_host() -> None:
    report = parse_report(json.dumps({"ok": True, "data_json": json.dumps("x" * 2000)}), 1000)
    assert not report.ok and report.limit == "result_bytes"


def test_forged_diagnostic_fields_are_dropped_or_the_entry_is() -> None:
    raw = [
        {"severity": "error", "code": "X", "message": "m", "limit": "nonsense", "line": "x", "frames": [{"line": "1"}]},
        {"severity": "fatal", "code": "X", "message": "m"},
        {"severity": "error", "code": 5, "message": "m"},
        "not a dict",
    ]
    report = parse_report(json.dumps({"ok": False, "error": "boom", "diagnostics": raw}), 1000)
    assert report.diagnostics == [{"severity": "error", "code": "X", "message": "m", "frames": []}]
    assert report.error == {"type": "Error", "message": "the code failed (no details)", "retryable": False}


def test_diagnostics_are_capped() -> None:
    raw = [{"severity": "info", "code": "C", "message": "m"}] * (MAX_DIAGNOSTICS + 10)
    assert len(parse_report(json.dumps({"ok": True, "diagnostics": raw}), 1000).diagnostics) == MAX_DIAGNOSTICS
