import json
import uuid

import pydantic
import pytest

from wasmexec import run_result_json_schema, validate_run_result
from wasmexec._envelope import encoded_size, inlined_json_schema, new_id, result_json

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
    "artifacts": [{"path": "out/chart.png", "size": 69, "sha256": "0" * 64, "mime_type": "image/png"}],
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


# -- the output line --------------------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_the_output_line_escapes_characters_that_line_based_readers_split_on(separator: str) -> None:
    value = {**VALID, "logs": [{"level": "log", "message": f"a{separator}b", "time_ms": 0.0}]}
    line = result_json(value)
    assert separator not in line and f"\\u{ord(separator):04x}" in line
    assert line.splitlines() == [line]
    assert json.loads(line) == value


def test_the_output_line_is_compact_utf8_json_that_round_trips() -> None:
    value = {**VALID, "logs": [{"level": "log", "message": 'é 😀 " \\ \n \x00', "time_ms": 0.0}]}
    line = result_json(value)
    assert line == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(line) == value


def test_the_output_line_never_carries_a_lone_surrogate() -> None:
    line = result_json({"text": "a\ud800b", "\udfff": 1})
    line.encode("utf-8")
    assert json.loads(line) == {"text": "a\ufffdb", "\ufffd": 1}


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_the_output_line_refuses_non_finite_numbers(number: float) -> None:
    with pytest.raises(ValueError):
        result_json({"x": number})


def test_the_encoded_size_counts_utf8_bytes_after_escaping() -> None:
    assert encoded_size("abc") == 5
    assert encoded_size("é") == 4
    assert encoded_size("\u2028") == 8
    assert encoded_size('"\n\x01') == 2 + 2 + 2 + 6
    assert encoded_size({"a": [1, 2]}) == len('{"a":[1,2]}')


def test_a_new_id_is_a_random_uuid4_in_hex_and_never_repeats() -> None:
    ids = [new_id() for _ in range(1000)]
    assert len(set(ids)) == len(ids)
    for made in ids:
        parsed = uuid.UUID(hex=made)
        assert parsed.hex == made and parsed.version == 4 and parsed.variant == uuid.RFC_4122


# -- the MCP tool's outputSchema: the same contract without $ref ------------------------------------------------


def test_the_inlined_schema_has_no_refs_and_accepts_and_rejects_what_the_schema_does() -> None:
    from jsonschema import Draft202012Validator

    schema = run_result_json_schema()
    inlined = inlined_json_schema(schema)
    assert "$ref" not in json.dumps(inlined) and "$defs" not in inlined
    error = {"type": "SandboxLimitError", "message": "m", "retryable": False}
    failing = {**VALID, "result": {"ok": False, "metrics": VALID["result"]["metrics"], "error": error}}
    cases = [VALID, failing, {**VALID, "logs": [{"level": "log", "message": "x", "time_ms": 0}]},
             {**VALID, "logs": [{"level": "shout", "message": "x", "time_ms": 0}]},
             {**VALID, "result": {"ok": True}}, {**failing, "result": {**failing["result"], "error": {"type": 1}}},
             {key: value for key, value in VALID.items() if key != "run_id"}]  # fmt: skip
    original, flat = Draft202012Validator(schema), Draft202012Validator(inlined)
    assert [original.is_valid(case) for case in cases] == [flat.is_valid(case) for case in cases]
    assert [flat.is_valid(case) for case in cases] == [True, True, True, False, False, False, False]


def test_a_recursive_schema_is_refused_rather_than_inlined_forever() -> None:
    recursive = {"type": "object", "properties": {"tree": {"$ref": "#/$defs/Node"}},
                 "$defs": {"Node": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}  # fmt: skip
    with pytest.raises(ValueError, match="recursive"):
        inlined_json_schema(recursive)
