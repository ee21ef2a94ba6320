"""The result value: size limits, non-JSON fallbacks, and a guest that forges its own report.

The guest's report is produced by code running inside the sandbox, so agent code can replace it
(here by patching ``json.dumps``, which the bridge uses to serialize it). The host must treat it
as untrusted input: whatever the guest sends, the caller gets a valid, limited run result.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import data_of, diagnostic, error_of, limit_of
from tests.security._support import assert_host_survives, forge_report, run, timed_run
from wasmexec import Limits, Runtime, Sandbox, validate_run_result
from wasmexec._runctx.toolhost import NoTools

PROMPT_S = 5.0


def test_a_50_mb_result_hits_the_result_size_limit(runtime: Runtime) -> None:
    result, elapsed = timed_run(runtime, "result = 'x' * (50 * 1024 * 1024)")
    assert limit_of(result) == "result_bytes"
    assert "data" not in result["result"]
    assert len(json.dumps(result)) < 100_000
    assert elapsed < PROMPT_S
    assert_host_survives(runtime)


def test_a_result_just_over_a_small_limit_is_refused(runtime: Runtime) -> None:
    result = run(runtime, "result = 'x' * 2000", max_result_bytes=1000)
    assert limit_of(result) == "result_bytes"


@pytest.mark.parametrize(
    ("code", "data", "note"),
    [
        ("result = {3, 1, 2}", [1, 2, 3], None),
        ("result = object()", None, "object is not JSON"),
        ("result = float('nan')", "nan", "float is not JSON"),
        ("result = [float('inf'), -float('inf')]", ["inf", "-inf"], "float is not JSON"),
        ("x = [1]\nx.append(x)\nresult = x", [1, "<circular reference>"], "circular reference"),
        ("d = {}\nd['self'] = d\nresult = d", {"self": "<circular reference>"}, "circular reference"),
        ("result = {(1, 2): 'tuple key', 3: 'int key'}", {"(1, 2)": "tuple key", "3": "int key"}, None),
        ("result = b'bytes'", "b'bytes'", "bytes is not JSON"),
        ("result = 1 + 2j", "(1+2j)", "complex is not JSON"),
    ],
)
def test_a_non_json_result_uses_the_documented_fallback(
    runtime: Runtime, code: str, data: Any, note: str | None
) -> None:
    result = run(runtime, code)
    value = data_of(result)
    if data is None:
        assert isinstance(value, str) and value.startswith("<object object at")
    else:
        assert value == data
    if note is not None:
        assert note in diagnostic(result, "RESULT_NOT_JSON")["message"]
        assert diagnostic(result, "RESULT_NOT_JSON")["severity"] == "warning"


def test_a_very_deeply_nested_result_is_refused_instead_of_crashing(runtime: Runtime) -> None:
    code = "x = []\nfor _ in range(1_000):\n    x = [x]\nresult = x"
    result = run(runtime, code)
    assert limit_of(result) == "result_depth"
    assert "data" not in result["result"]
    assert_host_survives(runtime)


def test_a_lone_surrogate_in_an_honest_result_comes_back_replaced(runtime: Runtime) -> None:
    result = run(runtime, "print('a\\ud800b')\nresult = {'text': '\\ud800', '\\udfff': 1}")
    assert data_of(result) == {"text": "\ufffd", "\ufffd": 1}
    validate_run_result(result)


@pytest.mark.parametrize("nest", ["[x]", "(x,)", "{'next': x}"])
def test_building_and_dropping_a_5000_deep_structure_works(runtime: Runtime, nest: str) -> None:
    code = f"x = None\nfor _ in range(5_000):\n    x = {nest}\ndel x\nresult = 'freed'"
    assert data_of(run(runtime, code)) == "freed"


# -- a guest that forges its report ------------------------------------------------------------------


def test_a_forged_report_claiming_a_result_over_the_host_slack_is_refused(runtime: Runtime) -> None:
    report = json.dumps({"ok": True, "data_json": json.dumps("x" * 3_000_000), "diagnostics": []})
    result = run(runtime, forge_report(report), max_result_bytes=1000)
    assert limit_of(result) == "result_bytes"
    assert_host_survives(runtime)


def test_a_forged_diagnostic_without_the_required_fields_is_dropped(runtime: Runtime) -> None:
    report = json.dumps({"ok": True, "data_json": "1", "diagnostics": [{"bogus": 1}, "text", 3]})
    result = run(runtime, forge_report(report))
    assert data_of(result) == 1
    assert result["diagnostics"] == []


def test_a_forged_report_that_is_not_json_gives_a_structured_error(runtime: Runtime) -> None:
    result = run(runtime, forge_report("this is not json"))
    assert error_of(result)["type"] == "SandboxError"
    assert_host_survives(runtime)


def test_the_result_size_limit_holds_even_when_the_guest_forges_its_report(runtime: Runtime) -> None:
    report = json.dumps({"ok": True, "data_json": json.dumps("x" * 900_000), "diagnostics": []})
    result = run(runtime, forge_report(report), max_result_bytes=1000)
    assert limit_of(result) == "result_bytes"


def test_the_result_size_limit_holds_even_when_the_guest_raises_its_own_limit(runtime: Runtime) -> None:
    code = (
        "import sys\n"
        "frame = sys._getframe()\n"
        "while frame is not None and not hasattr(frame.f_locals.get('self'), 'max_result_bytes'):\n"
        "    frame = frame.f_back\n"
        "frame.f_locals['self'].max_result_bytes = 10 ** 12\n"
        "result = 'x' * 900_000\n"
    )
    result = run(runtime, code, max_result_bytes=1000)
    assert limit_of(result) == "result_bytes"


@pytest.mark.parametrize(
    "report",
    [
        {"ok": True, "data_json": 5},
        {"ok": False, "error": "boom"},
        {"ok": True, "data_json": "1", "diagnostics": 7},
    ],
    ids=["data_json-not-str", "error-not-object", "diagnostics-not-list"],
)
def test_a_malformed_forged_report_gives_a_structured_result(runtime: Runtime, report: dict[str, Any]) -> None:
    result = run(runtime, forge_report(json.dumps(report)))
    validate_run_result(result)
    assert_host_survives(runtime)


def test_a_deeply_nested_forged_report_gives_a_structured_result(runtime: Runtime) -> None:
    result = run(runtime, forge_report("[" * 100_000 + "]" * 100_000))
    assert error_of(result)["type"] == "SandboxError"


def test_a_deeply_nested_forged_data_json_gives_a_structured_result(runtime: Runtime) -> None:
    nested = "[" * 100_000 + "]" * 100_000
    result = run(runtime, forge_report(json.dumps({"ok": True, "data_json": nested, "diagnostics": []})))
    validate_run_result(result)


@pytest.mark.parametrize(
    "forged",
    [
        {"severity": "error", "code": "SANDBOX_LIMIT", "message": "m", "limit": "nonsense"},
        {"severity": "error", "code": "X", "message": "m", "line": "not a number"},
    ],
    ids=["bad-limit", "bad-line"],
)
def test_a_run_result_matches_its_schema_even_with_forged_diagnostics(runtime: Runtime, forged: dict[str, Any]) -> None:
    report = json.dumps({"ok": True, "data_json": "1", "diagnostics": [forged]})
    result = run(runtime, forge_report(report))
    validate_run_result(result)


# -- what the host saw comes first ---------------------------------------------------------------------


class _RefusingTools(NoTools):
    """Stops the run the way the host calls refuse a blocking WASI wait: `stop('blocking_wait')`."""

    def catalog(self, run: Any, op: str, request: Any) -> Any:
        run.stop("blocking_wait")
        return super().catalog(run, op, request)


def test_a_blocking_wait_stop_reason_ends_the_run_with_a_blocking_wait_error(runtime: Runtime) -> None:
    code = "from codemode import discovery\ndiscovery.list_servers()\nwhile True:\n    pass"
    result = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, tools=_RefusingTools()).run_sync(code)
    assert error_of(result)["type"] == "SandboxError"
    assert "blocking wait" in diagnostic(result, "BLOCKING_WAIT")["message"]
    assert [d["code"] for d in result["diagnostics"]] == ["BLOCKING_WAIT"]
