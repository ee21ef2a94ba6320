import pydantic
import pytest

from wasmexec import run_result_json_schema, validate_run_result

VALID = {
    "run_id": "r",
    "trace_id": "t",
    "tool_name": "run_python",
    "tool_version": "0.1.0",
    "input_digest": "sha256:00",
    "output_digest": "sha256:11",
    "sandbox_image": "sha256:22",
    "duration_ms": 1.5,
    "approval_state": "NOT_REQUIRED",
    "result": {
        "ok": True,
        "data": {"x": [1]},
        "metrics": {"duration_ms": 1.0, "fuel_used": 3, "memory_peak_bytes": None, "tool_calls": 0},
    },
    "logs": [{"level": "log", "message": "hi", "time_ms": 0.1}],
    "diagnostics": [{"severity": "error", "code": "SANDBOX_LIMIT", "message": "m", "hint": "h", "limit": "timeout"}],
    "tool_trace": [{"server_id": "s", "tool_name": "t", "duration_ms": 2.0, "ok": False, "error": "boom"}],
}


def test_a_complete_result_validates() -> None:
    assert validate_run_result(VALID) == VALID


@pytest.mark.parametrize(
    "broken",
    [
        {**VALID, "approval_state": "MAYBE"},
        {**VALID, "result": {"ok": True, "metrics": VALID["result"]["metrics"]}},
        {**VALID, "logs": [{"level": "shout", "message": "x", "time_ms": 0}]},
        {key: value for key, value in VALID.items() if key != "run_id"},
    ],
)
def test_a_result_off_the_contract_is_rejected(broken: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        validate_run_result(broken)


def test_the_json_schema_names_every_top_level_key_as_required() -> None:
    schema = run_result_json_schema()
    assert schema["type"] == "object"
    assert set(schema["required"]) == set(VALID)
    assert "Success" in schema["$defs"] and "Failure" in schema["$defs"]
