"""The guest's report is untrusted: whatever it says, the parsed report fits the contract."""

import json
from typing import Any

import pytest

from wasmexec._envelope import MAX_RESULT_DEPTH
from wasmexec._sandbox.report import GUEST_CODES, MAX_DIAGNOSTICS, json_depth, parse_report


def _ok(data_json: str, max_result_bytes: int = 10_000_000) -> Any:
    return parse_report(json.dumps({"ok": True, "data_json": data_json}), max_result_bytes)


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
    assert not report.ok
    assert (report.error is not None and report.error["type"] == "SandboxError") or report.limit == "result_depth"


def test_the_result_size_is_enforced_on_the_host() -> None:
    report = parse_report(json.dumps({"ok": True, "data_json": json.dumps("x" * 2000)}), 1000)
    assert not report.ok and report.limit == "result_bytes"


@pytest.mark.parametrize("data_json", ["NaN", "[Infinity]", '{"a": -Infinity}', "1e999", "[-1E+400]", "1" * 400 + ".5"])
def test_data_with_a_non_finite_number_is_not_strict_json(data_json: str) -> None:
    report = _ok(data_json)
    assert not report.ok and report.error is not None
    assert report.error["type"] == "SandboxError" and "not strict JSON" in report.error["message"]


@pytest.mark.parametrize("data_json", ["1e308", "[1e-999, 12345678901234567890]", "1" * 400, '"e999 NaN"'])
def test_big_but_finite_numbers_and_look_alikes_in_strings_are_fine(data_json: str) -> None:
    report = _ok(data_json)
    assert report.ok and report.data == json.loads(data_json)


def test_lone_surrogates_in_data_become_replacement_characters_and_pairs_their_character() -> None:
    report = _ok('{"\\ud800": ["\\udfffx", "\\ud83d\\ude00", "\\\\ud800"]}')
    assert report.ok and report.data == {"\ufffd": ["\ufffdx", "\U0001f600", "\\ud800"]}


def test_lone_surrogates_in_texts_become_replacement_characters() -> None:
    raw = {"ok": False, "error": {"type": "T\ud800", "message": "m\udfff"},
           "diagnostics": [{"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "\ud800", "hint": "\udc00",
                            "frames": [{"line": 1, "function": "\ud800", "text": "\udfff"}]}]}  # fmt: skip
    report = parse_report(json.dumps(raw), 1000)
    assert report.error == {"type": "T\ufffd", "message": "m\ufffd", "retryable": False}
    (entry,) = report.diagnostics
    assert entry["message"] == entry["hint"] == "\ufffd"
    assert entry["frames"] == [{"line": 1, "function": "\ufffd", "text": "\ufffd"}]


def test_only_guest_codes_are_kept_and_never_with_a_limit() -> None:
    raw = [{"severity": "warning", "code": code, "message": "m", "limit": "timeout"}
           for code in [*sorted(GUEST_CODES), "TOOLS_UNAVAILABLE", "LOGS_TRUNCATED", "SANDBOX_TRAP", "X"]]  # fmt: skip
    report = parse_report(json.dumps({"ok": True, "data_json": "1", "diagnostics": raw}), 1000)
    assert [entry["code"] for entry in report.diagnostics] == sorted(GUEST_CODES)
    assert all("limit" not in entry for entry in report.diagnostics)


def test_the_guest_cannot_make_an_error_retryable() -> None:
    report = parse_report(json.dumps({"ok": False, "error": {"type": "E", "message": "m", "retryable": True}}), 1000)
    assert report.error is not None and report.error["retryable"] is False


def test_a_sandbox_limit_diagnostic_is_a_claim_for_the_host_to_check() -> None:
    raw = {"ok": False, "error": {"type": "SandboxLimitError", "message": "too many calls"},
           "diagnostics": [{"severity": "error", "code": "SANDBOX_LIMIT", "message": "too many calls", "hint": "h",
                            "limit": "tool_calls", "error_class": "SandboxLimitError"}]}  # fmt: skip
    report = parse_report(json.dumps(raw), 1000)
    assert report.claimed_limit == "tool_calls" and report.diagnostics == []
    assert report.claim == {"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "too many calls",
                            "hint": "h", "error_class": "SandboxLimitError"}  # fmt: skip


def test_a_sandbox_limit_claim_on_a_successful_run_is_dropped() -> None:
    raw = [{"severity": "error", "code": "SANDBOX_LIMIT", "message": "m", "limit": "memory"}]
    report = parse_report(json.dumps({"ok": True, "data_json": "1", "diagnostics": raw}), 1000)
    assert report.ok and report.claimed_limit is None and report.claim is None and report.diagnostics == []


def test_forged_diagnostic_fields_are_dropped_or_the_entry_is() -> None:
    raw = [
        {"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "m", "limit": "nonsense", "line": "x",
         "frames": [{"line": "1"}]},
        {"severity": "fatal", "code": "UNCAUGHT_EXCEPTION", "message": "m"},
        {"severity": "error", "code": 5, "message": "m"},
        "not a dict",
    ]  # fmt: skip
    report = parse_report(json.dumps({"ok": False, "error": "boom", "diagnostics": raw}), 1000)
    assert report.diagnostics == [{"severity": "error", "code": "UNCAUGHT_EXCEPTION", "message": "m", "frames": []}]
    assert report.error == {"type": "Error", "message": "the code failed (no details)", "retryable": False}


def test_diagnostics_are_capped() -> None:
    raw = [{"severity": "info", "code": "RESULT_NOT_JSON", "message": "m"}] * (MAX_DIAGNOSTICS + 10)
    assert len(parse_report(json.dumps({"ok": True, "diagnostics": raw}), 1000).diagnostics) == MAX_DIAGNOSTICS


@pytest.mark.parametrize(
    ("data_json", "depth"),
    [
        ("1", 0), ('"[[["', 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4), ('["]]]", ["\\"[[", "\\\\"]]', 2),
        ('[{"k]": "{"}, [[[]]]]', 4), ("[" * 150 + "]" * 150, 150),
    ],
)  # fmt: skip
def test_the_depth_of_json_text_counts_containers_not_brackets_in_strings(data_json: str, depth: int) -> None:
    assert json_depth(data_json) == depth


def test_data_at_the_depth_limit_is_taken_and_one_level_more_is_refused() -> None:
    at_limit = "[" * MAX_RESULT_DEPTH + "]" * MAX_RESULT_DEPTH
    assert _ok(at_limit).ok
    report = _ok("[" + at_limit + "]")
    assert not report.ok and report.limit == "result_depth"
