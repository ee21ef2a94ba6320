"""The ASGI app `serve --http` runs: the MCP endpoint plus the operator's endpoints.

``GET /healthz`` (JSON, `wasmexec._server.health`) and ``GET /metrics`` (Prometheus,
`wasmexec._server.metrics`) are answered here, before the MCP app: they are read-only
and hold no secrets, so they take any ``Host`` (probes and scrapers use the pod's
address). Everything else goes to the SDK's streamable HTTP app, whose DNS-rebinding
protection checks ``Host`` and ``Origin``: loopback names always, plus the hosts and
origins the operator names (`transport_security`), for a deployment behind a reverse
proxy.

When the server is full or draining (`Admission.full`), a ``tools/call`` of ``run_python``
that starts a run is answered 503 with ``Retry-After`` before the JSON-RPC dispatch; other
requests (listing, resuming a paused run, an answer to a question a run asked) go through.
The body is read (at most `MAX_PEEKED_BODY_BYTES`) only then. A draining server refuses a
2025-era ``initialize`` the same way (a new session would end with the process) and answers
``/healthz`` with 503, so a proxy's health check takes it out of rotation.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, TypeGuard

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings

from wasmexec._envelope import TOOL_NAME
from wasmexec._server.admission import RETRY_AFTER_S, Admission, refusal
from wasmexec._server.health import health
from wasmexec._server.metrics import RunMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The SDK refuses larger bodies (413); a larger one is passed on unread for it to refuse.
MAX_PEEKED_BODY_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE
#: What the SDK allows on its own for a server bound to loopback; kept when the operator names more.
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
#: The JSON-RPC error code of the 503 body (implementation-defined server error range).
SERVER_BUSY_CODE = -32000


def transport_security(allowed_hosts: list[str], allowed_origins: list[str]) -> TransportSecuritySettings:
    """DNS-rebinding protection for loopback plus the named hosts and origins.

    A host named without a port also matches it with any port (``mcp.example.com`` and
    ``mcp.example.com:8443``). A request without ``Origin`` (any non-browser client) passes.
    """
    hosts = list(LOOPBACK_HOSTS)
    for host in allowed_hosts:
        hosts.append(host)
        if not _has_port(host):
            hosts.append(host + ":*")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[*LOOPBACK_ORIGINS, *allowed_origins],
    )


def _has_port(host: str) -> bool:
    return host.rpartition(":")[2].isdigit() and not host.endswith("]")


class OperationsApp:
    """Routes ``/healthz`` and ``/metrics``; refuses new runs with 503 when full; the rest goes to `mcp_app`."""

    def __init__(
        self,
        mcp_app: ASGIApp,
        admission: Admission,
        metrics: RunMetrics,
        breaker_states: Callable[[], dict[str, str]] | None = None,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        replica: str | None = None,
    ) -> None:
        self.mcp_app = mcp_app
        self.admission = admission
        self.metrics = metrics
        self.breaker_states = breaker_states
        self.profiles = profiles
        self.replica = replica

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.mcp_app(scope, receive, send)  # lifespan: the SDK's session manager starts there
            return
        path, method = scope.get("path", ""), scope.get("method", "")
        if path in ("/healthz", "/metrics"):
            await self._operator(path, method, send)
            return
        if method == "POST" and self.admission.full():
            body, complete = await _peek(scope, receive)
            request = _json(body) if complete else None
            # Draining, it takes no new 2025-era session either: a session opened here would end with it.
            if _starts_a_run(request) or (self.admission.draining and _opens_a_session(request)):
                await _busy(send, request, refusal(self.admission))
                return
            receive = _replay(body, complete, receive)
        await self.mcp_app(scope, receive, send)

    async def _operator(self, path: str, method: str, send: Send) -> None:
        if method != "GET":
            await respond(send, 405, b"only GET\n", "text/plain; charset=utf-8", [(b"allow", b"GET")])
        elif path == "/healthz":
            document = health(self.admission, self.breaker_states, self.profiles, self.replica)
            status = 503 if document["status"] == "draining" else 200
            await respond(send, status, json.dumps(document).encode(), "application/json")
        else:
            exposition, content_type = self.metrics.exposition()
            await respond(send, 200, exposition, content_type)


async def _peek(scope: Scope, receive: Receive) -> tuple[bytes, bool]:
    """The request body, and whether it is all there (False: too large to look at, or cut short)."""
    declared = dict(scope.get("headers") or []).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > MAX_PEEKED_BODY_BYTES:
        return b"", False
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts), False
        chunk = message.get("body", b"")
        parts.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(parts), True
        if size > MAX_PEEKED_BODY_BYTES:
            return b"".join(parts), False


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    """A `receive` that first gives back what `_peek` read, then the rest of the request."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replay


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _starts_a_run(request: Any) -> TypeGuard[dict[str, Any]]:
    """Whether a JSON-RPC message is a ``tools/call`` of run_python that is not a resumed (2026-era) run."""
    if not isinstance(request, dict) or request.get("method") != "tools/call":
        return False
    params = request.get("params")
    if not isinstance(params, dict) or params.get("name") != TOOL_NAME:
        return False
    return not params.get("requestState") and not params.get("request_state")


def _opens_a_session(request: Any) -> TypeGuard[dict[str, Any]]:
    """Whether a JSON-RPC message is a 2025-era ``initialize`` (the session it opens lives in this process)."""
    return isinstance(request, dict) and request.get("method") == "initialize"


async def _busy(send: Send, request: dict[str, Any], message: str) -> None:
    error = {"code": SERVER_BUSY_CODE, "message": message,
             "data": {"retryable": True, "retry_after_s": RETRY_AFTER_S}}  # fmt: skip
    body = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error}).encode()
    await respond(send, 503, body, "application/json", [(b"retry-after", str(RETRY_AFTER_S).encode())])


async def respond(
    send: Send, status: int, body: bytes, content_type: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    all_headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                   (b"cache-control", b"no-store"), *(headers or [])]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})
