"""What a sampler or a client answers is untrusted: the checks, the token estimate, the MCP reply forms."""

from __future__ import annotations

import pytest
from mcp.types import CreateMessageResult, ImageContent, TextContent

from wasmexec._runctx.llm_ask import MIN_ANSWER_BYTES, check_answer, estimate_tokens, trace_outcome
from wasmexec._runctx.toolhost import HostCallError
from wasmexec._server.sampling import create_message_request, read_reply


def test_tokens_are_the_samplers_count_else_an_estimate_of_four_bytes_each() -> None:
    assert check_answer({"text": "hello world", "tokens": 2}, 10).tokens == 2
    estimated = check_answer("hello world", 10)
    assert estimated.estimated and estimated.tokens == estimate_tokens("hello world") == 3
    assert check_answer({"text": "x", "tokens": True}, 10).estimated  # a bool is not a count
    assert estimate_tokens("ü" * 4) == 2  # UTF-8 bytes, not characters


def test_answers_that_are_not_text_too_long_or_broken_are_refused() -> None:
    for answer in (None, 5, {"text": b"bytes"}, "\udc80", "x" * (MIN_ANSWER_BYTES + 1)):
        with pytest.raises(HostCallError) as caught:
            check_answer(answer, 1)
        assert caught.value.kind == "tool-error"


def test_a_client_reply_is_read_as_text_in_either_form() -> None:
    text = CreateMessageResult(role="assistant", content=TextContent(type="text", text="hi"), model="m")
    assert read_reply(text) == {"text": "hi", "model": "m"}
    assert read_reply(text.model_dump(by_alias=True)) == {"text": "hi", "model": "m"}
    picture = ImageContent(type="image", data="aGk=", mime_type="image/png")
    image = CreateMessageResult(role="assistant", content=picture, model="m")
    refused = read_reply(image)
    assert isinstance(refused, HostCallError) and "image content, not text" in refused.message
    assert isinstance(read_reply(None), HostCallError) and isinstance(read_reply({"content": 5}), HostCallError)


def test_the_request_sent_to_the_client_carries_prompt_system_and_max_tokens_only() -> None:
    params = create_message_request({"prompt": "p", "system": None, "max_tokens": 7}).params
    assert params.max_tokens == 7 and params.system_prompt is None and params.include_context == "none"
    assert [message.content.text for message in params.messages] == ["p"]  # type: ignore[union-attr]


def test_only_llm_ask_trace_entries_are_sampling_outcomes() -> None:
    ask = {"server_id": "codemode", "tool_name": "llm.ask", "duration_ms": 1.0}
    assert trace_outcome({**ask, "ok": True}) == "ok"  # type: ignore[typeddict-item]
    assert trace_outcome({**ask, "ok": False, "error": "unavailable: no model"}) == "unavailable"  # type: ignore[typeddict-item]
    assert trace_outcome({"server_id": "codemode", "tool_name": "other", "duration_ms": 1.0, "ok": True}) is None
