"""`codemode.llm.ask` over MCP: the run's sampler asks the client that sent ``run_python``.

In the 2025 era the run's thread hands a `Sample` to the request driving the run
(`wasmexec._server.runs`) and waits for its answer, which the request asks of the client
with a ``sampling/createMessage`` request over the session (`ask_session`). The 2026-07-28
era has no server-to-client requests: the run pauses by replay, like an approval; the
request returns an ``InputRequiredResult`` carrying a `create_message_request` per question
(`input_requests`), the run ends, and the client's retry brings the answers (`replies`),
which any replica's replay of the run gives those questions (`wasmexec._runctx.journal`). Whatever the client answers is
untrusted: only one text block is an answer, and `wasmexec._runctx.llm_ask` checks its size
and Unicode.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    ClientCapabilities,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    SamplingCapability,
    SamplingMessage,
    TextContent,
)

from wasmexec._runctx.toolhost import HostCallError

#: The keys of sampling requests in a 2026-era ``InputRequiredResult`` (and of their answers in the retry).
INPUT_KEY = "sampling-{index}"


@dataclass(frozen=True)
class Sample:
    """The run waits for the client's model to answer a sampling request (`wasmexec._runctx.llm_ask`)."""

    request: dict[str, Any]
    _reply: queue.Queue[dict[str, Any] | HostCallError] = field(default_factory=lambda: queue.Queue(maxsize=1))

    def answer(self, reply: dict[str, Any] | HostCallError) -> None:
        """Delivers the client's answer (or why there is none); only the first one counts."""
        try:
            self._reply.put_nowait(reply)
        except queue.Full:
            pass

    def wait(self, deadline: float) -> dict[str, Any]:
        """Blocks the run's sampler until the answer or `deadline` (monotonic); raises HostCallError."""
        try:
            reply = self._reply.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise _too_late() from None
        if isinstance(reply, HostCallError):
            raise reply
        return reply


def _too_late() -> HostCallError:
    return HostCallError("limit-exceeded", "the client's model did not answer before the run's deadline",
                         "Ask for shorter answers, or ask for a higher timeout_ms.", limit="timeout")  # fmt: skip


def input_requests(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """2026 era: every question the run paused on, asked in one round (the client answers them together)."""
    return {INPUT_KEY.format(index=i): create_message_request(request) for i, request in enumerate(requests)}


def replies(count: int, responses: dict[str, Any]) -> list[dict[str, Any] | HostCallError]:
    """2026 era: the client's retry's answers to the `count` questions asked (a missing one is an error)."""
    return [read_reply(responses.get(INPUT_KEY.format(index=index))) for index in range(count)]


def client_can_sample(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client that sent this request declared the sampling capability (both eras)."""
    return ctx.session.check_client_capability(_SAMPLING)


#: The capability `client_can_sample` asks for (made once: it is asked on every call).
_SAMPLING = ClientCapabilities(sampling=SamplingCapability())


def create_message_request(request: dict[str, Any]) -> CreateMessageRequest:
    """The ``sampling/createMessage`` request for a sampler's request (prompt, system, max_tokens)."""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=request["prompt"]))
    return CreateMessageRequest(params=CreateMessageRequestParams(
        messages=[message], system_prompt=request["system"], max_tokens=request["max_tokens"], include_context="none",
    ))  # fmt: skip


async def ask_session(ctx: ServerRequestContext[Any, Any], request: dict[str, Any], timeout_s: float) -> Any:
    """2025 era: asks the client over the session; the answer as `read_reply` gives it, never raises."""
    try:
        with anyio.fail_after(max(0.0, timeout_s)):
            # send_request, not session.create_message: the same request without its deprecation warning.
            metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
            result = await ctx.session.send_request(create_message_request(request), CreateMessageResult,
                                                    metadata=metadata)  # fmt: skip
    except TimeoutError:
        return _too_late()
    except Exception as exc:  # the client refused, failed, or sent something that is not a CreateMessageResult
        return HostCallError("tool-error", f"the client did not answer the sampling request: {exc}"[:500],
                             "The user or the client may have refused it; do not retry at once.")  # fmt: skip
    return read_reply(result)


async def ask_and_answer(ctx: ServerRequestContext[Any, Any], sample: Sample, timeout_s: float) -> None:
    """2025 era: asks the client and hands the answer to the waiting run."""
    sample.answer(await ask_session(ctx, sample.request, timeout_s))


def read_reply(reply: Any) -> dict[str, Any] | HostCallError:
    """The client's CreateMessageResult (or its dict form) as a sampler's answer ``{"text", "model"}``."""
    if reply is None:
        return HostCallError("tool-error", "the client answered without a sampling result",
                             "The user or the client may have refused it.")  # fmt: skip
    if not isinstance(reply, dict):
        dump = getattr(reply, "model_dump", None)
        reply = dump(by_alias=True, exclude_none=True) if callable(dump) else {}
    content = reply.get("content")
    if isinstance(content, list) and len(content) == 1:
        content = content[0]
    kind = content.get("type") if isinstance(content, dict) else None
    if kind != "text" or not isinstance(content, dict) or not isinstance(content.get("text"), str):
        shown = kind if isinstance(kind, str) else type(content).__name__
        return HostCallError("tool-error", f"the client's model answered with {str(shown)[:40]} content, not text",
                             "llm.ask accepts only text answers: ask for text.")  # fmt: skip
    model = reply.get("model")
    return {"text": content["text"], "model": model if isinstance(model, str) else ""}
