"""2026-era approvals by replay: the `request_state` a paused run hands out, and what its retry reads back.

A run that needs the user's approval, or an answer of the client's model (`llm.ask`), returns an
input-required result whose ``requestState`` carries everything the retry needs, and ends (no
thread, no run slot is held while the user decides). The retry, on any replica, runs the code
again and answers the calls the first run made from the log in the state (`wasmexec._runctx.journal`),
then runs the approved call once (or gives the questions the model's answers from the retry)
and goes on.

Sealing and binding are the SDK's (`mcp.server.request_state`): a `RequestStateBoundary` on
the server seals every outgoing state with AES-256-GCM under a key derived from the state key
(``--state-key-file``; without one a key of this process only, which keeps today's
single-replica behaviour) and checks every incoming one: its expiry, the request it was minted
for (the tool name and a digest of every argument, so the same state with other code is
refused), the audience and the caller (`wasmexec._server.callers.caller_key`: the
authenticated principal, when there is one). A refused state gets the SDK's frozen
``-32602 Invalid or expired requestState`` and nothing runs.

Inside the seal (this module): ``{"v", "kind": "replay", "nonce", "deadline", "request",
"log" | "ref"}``. The deadline is the paused run's own (Unix seconds); the nonce is single-use
through the shared store (`wasmexec._state.approvals`); the request digest repeats the SDK's
binding; the log is the packed journal, inline up to `MAX_INLINE_LOG_BYTES`, else kept in the
store and named by its digest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from typing import Any

from mcp import MCPError
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.types import INVALID_PARAMS, CallToolResult, InputRequiredResult

from wasmexec._runctx.journal import MAX_INLINE_LOG_BYTES, b64, unb64, unpack
from wasmexec._server.callers import caller_key
from wasmexec._state.approvals import ApprovalStore, Refused
from wasmexec._state.key import StateKey

logger = logging.getLogger(__name__)

#: The boundary's own expiry, a ceiling above every run's deadline (each state checks its own deadline).
TTL_MARGIN_S = 60.0
_VERSION = 1


def boundary(key: StateKey, max_timeout_s: float) -> RequestStateBoundary:
    """The SDK's request-state boundary under the state key, binding the caller (see the module)."""
    security = RequestStateSecurity(keys=[key.derive("request-state")], ttl=max_timeout_s + TTL_MARGIN_S,
                                    bind_principal=caller_key)  # fmt: skip
    return RequestStateBoundary(security, default_audience="wasmexec")


def invalid(reason: str) -> MCPError:
    """The SDK's frozen refusal; the reason goes to the server log only (as the SDK does)."""
    logger.warning("requestState rejected on tools/call: %s", reason)
    return MCPError(INVALID_PARAMS, "Invalid or expired requestState", data={"reason": "invalid_request_state"})


def request_digest(arguments: dict[str, Any] | None) -> str:
    text = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def pause_state(store: ApprovalStore, packed: bytes, deadline: float, arguments: dict[str, Any] | None) -> str:
    """The plaintext state of a run paused for approval (the boundary seals it on the way out)."""
    state: dict[str, Any] = {"v": _VERSION, "kind": "replay", "nonce": secrets.token_urlsafe(24),
                             "deadline": deadline, "request": request_digest(arguments)}  # fmt: skip
    if len(packed) <= MAX_INLINE_LOG_BYTES:
        state["log"] = b64(packed)
    else:
        state["ref"] = store.put_log(packed, deadline)
    store.sweep()  # each pause removes a few expired records (any replica may)
    return json.dumps(state, separators=(",", ":"))


def read_state(text: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The state a retry brought (unsealed and verified by the boundary); raises `invalid` when unusable."""
    try:
        state = json.loads(text)
    except ValueError:
        raise invalid("not a wasmexec state") from None
    if not isinstance(state, dict) or state.get("v") != _VERSION:
        raise invalid("not a wasmexec state")
    if state.get("kind") != "replay" or not isinstance(state.get("nonce"), str):
        raise invalid("not a wasmexec state")
    deadline = state.get("deadline")
    if not isinstance(deadline, int | float) or not time.time() < deadline:
        raise invalid("the paused run's deadline has passed")
    if state.get("request") != request_digest(arguments):
        raise invalid("request binding")
    return state


def payload(store: ApprovalStore, state: dict[str, Any]) -> dict[str, Any]:
    """The journal snapshot a state carries or names; raises `invalid` when it cannot be had."""
    try:
        if isinstance(state.get("log"), str):
            packed = unb64(state["log"])
        elif isinstance(state.get("ref"), str):
            packed = store.get_log(state["ref"])
        else:
            raise ValueError("no log")
        return unpack(packed)
    except (Refused, ValueError) as exc:
        raise invalid(f"log: {exc}") from None


def record(result: CallToolResult | InputRequiredResult) -> dict[str, Any]:
    """A retry's answer as the store keeps it (plaintext state inside: the boundary seals it when sent)."""
    kind = "input" if isinstance(result, InputRequiredResult) else "call"
    return {"kind": kind, "result": result.model_dump(by_alias=True, mode="json", exclude_none=True)}


def recorded(data: dict[str, Any]) -> CallToolResult | InputRequiredResult:
    """The answer of an earlier retry of the same state (see `record`)."""
    model = InputRequiredResult if data.get("kind") == "input" else CallToolResult
    return model.model_validate(data.get("result"))
