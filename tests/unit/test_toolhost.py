"""The tool-host protocol: its error kinds match the WIT contract, its payloads are WIT-safe."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import get_args

import pytest

from wasmexec._runctx.toolhost import (
    MAX_PAYLOAD_BYTES,
    ErrorKind,
    HostCallError,
    NoTools,
    encode_payload,
    internal_error,
)

WIT = Path(__file__).resolve().parents[2] / "wasm_assets" / "wit" / "world.wit"


def _wit_enum_cases(text: str, name: str) -> list[str]:
    match = re.search(rf"enum\s+{re.escape(name)}\s*\{{(.*?)\}}", text, re.DOTALL)
    assert match, f"no enum {name} in {WIT}"
    body = re.sub(r"//[^\n]*", "", match.group(1))
    return [case.strip() for case in body.split(",") if case.strip()]


def test_the_error_kind_literal_lists_exactly_the_wit_error_kind_cases_in_order() -> None:
    assert list(get_args(ErrorKind)) == _wit_enum_cases(WIT.read_text(), "error-kind")


def test_an_answer_is_compact_json_text() -> None:
    assert encode_payload({"a": [1, 2], "b": "é"}, "the answer") == '{"a":[1,2],"b":"é"}'


def test_an_answer_holding_a_lone_surrogate_is_still_valid_utf8_and_the_same_json() -> None:
    value = {"a": "\ud800x", "b": "é"}
    text = encode_payload(value, "the answer")
    text.encode("utf-8")
    assert json.loads(text) == value


def test_an_answer_over_the_payload_cap_is_a_limit_error_naming_the_sizes() -> None:
    with pytest.raises(HostCallError) as caught:
        encode_payload("x" * MAX_PAYLOAD_BYTES, "the result of t")
    error = caught.value
    assert error.kind == "limit-exceeded" and error.detail == {"limit": "payload_bytes"}
    assert f"the limit is {MAX_PAYLOAD_BYTES}" in error.message and error.hint


def test_a_host_bug_becomes_a_short_internal_error() -> None:
    error = internal_error(ValueError("x" * 10_000))
    assert error.kind == "internal" and error.message.startswith("host error: ValueError: ")
    assert len(error.message) <= 500


def test_without_servers_listing_works_and_everything_else_is_not_found() -> None:
    tools = NoTools()
    assert tools.catalog(None, "list_servers", {}) == []  # type: ignore[arg-type]
    with pytest.raises(HostCallError) as caught:
        tools.start_call(None, 1, "s", "t", {})  # type: ignore[arg-type]
    assert caught.value.kind == "not-found" and caught.value.detail == {"what": "server"}
