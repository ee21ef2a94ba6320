"""The run_python input schema: the session handle is routable over 2026-era HTTP and keeps the tool listed."""

from __future__ import annotations

from mcp.shared.inbound import find_invalid_x_mcp_header

from wasmexec import Limits
from wasmexec._server.description import DESCRIPTION, MAX_INPUT_BYTES, input_schema


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
