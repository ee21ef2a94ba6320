"""The run_python input schema: the session handle is routable over 2026-era HTTP and keeps the tool listed;
the server's quick check of code-only calls says what the schema says."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.inbound import find_invalid_x_mcp_header

from wasmexec import Limits
from wasmexec._server.description import DESCRIPTION, MAX_INPUT_BYTES, input_schema
from wasmexec._server.server import _code_only_check
from wasmexec._tools.validation import schema_checker


def test_the_session_id_header_annotation_is_valid_so_2026_clients_keep_the_tool() -> None:
    schema = input_schema(Limits())
    assert find_invalid_x_mcp_header(schema) is None
    session_id = schema["properties"]["session_id"]
    assert session_id["x-mcp-header"] == "Session-Id" and session_id["type"] == "string"


def test_a_nullable_session_id_would_be_invalid() -> None:
    """Why session_id stays a plain string: the SDK's rule rejects a type list, and 2026 clients drop the tool."""
    schema = input_schema(Limits())
    schema["properties"]["session_id"] = {**schema["properties"]["session_id"], "type": ["string", "null"]}
    assert find_invalid_x_mcp_header(schema) is not None


def test_the_files_argument_states_its_total_size_and_the_description_explains_files_and_sessions() -> None:
    files = input_schema(Limits())["properties"]["files"]
    assert f"{MAX_INPUT_BYTES // (1024 * 1024)} MiB" in files["description"]
    assert files["items"]["required"] == ["path"] and files["items"]["additionalProperties"] is False
    for word in ("/workspace", "artifacts", "session_id", "skills."):
        assert word in DESCRIPTION


CODE_ONLY_CASES = [
    {"code": "result = 1"},
    {"code": ""},
    {"code": "é" * 10},
    {"code": 1},
    {"code": None},
    {"code": ["result = 1"]},
    {"code": "x" * 1025},
    {"code": "x" * 1024},
    {"code": "x", "timeout_ms": 5},
    {"code": "x", "unknown": 1},
    {"timeout_ms": 5},
    {},
]


@pytest.mark.parametrize("arguments", CODE_ONLY_CASES, ids=repr)
def test_the_servers_quick_check_of_code_only_arguments_agrees_with_the_schema(arguments: dict[str, Any]) -> None:
    schema = input_schema(Limits())
    schema["properties"]["code"]["maxLength"] = 1024  # a bound these cases reach
    fits, errors = _code_only_check(schema), schema_checker(schema)
    # It may only say yes where the validator finds nothing; it says yes to every valid code-only call.
    assert fits(arguments) == (set(arguments) == {"code"} and not errors(arguments))


def test_a_code_schema_the_quick_check_does_not_know_sends_every_call_to_the_validator() -> None:
    schema = input_schema(Limits())
    schema["properties"]["code"]["pattern"] = "^import"
    assert not _code_only_check(schema)({"code": "result = 1"})
    schema = input_schema(Limits())
    schema["minProperties"] = 2
    assert not _code_only_check(schema)({"code": "result = 1"})
