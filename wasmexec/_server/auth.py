"""Who may use the MCP endpoint of `serve --http`: bearer tokens, checked before the SDK's app sees a request.

Two ways to know a token, alone or together: a token file (`tokenfile`, the principal is
the line's name) and an OAuth 2.1 issuer (`jwt_auth`, the principal is the token's issuer
and subject). A request to the MCP endpoint without a valid token is answered ``401`` with
``WWW-Authenticate: Bearer …`` (RFC 6750: with ``error="invalid_token"`` only when a token
was sent; with the ``resource_metadata`` URL of RFC 9728 in OAuth mode, where the
protected-resource metadata document is served without a token at the well-known path the
SDK's clients look up). When the issuer's keys cannot be fetched the answer is ``503`` with
``Retry-After``: the token may well be valid.

A request with a valid token goes on with the SDK's own markers of an authenticated
request: ``scope["user"]`` (an `AuthenticatedUser`, which the SDK's session manager binds
2025-era sessions to) and the access-token context variable (`AuthContextMiddleware`),
which `wasmexec._server.callers.caller_key` reads, so sessions, artifacts, vaults and
paused runs belong to the principal on every replica; and `wasmexec._audit.PRINCIPAL`,
so every audit line of its runs names it. ``/healthz`` and ``/metrics`` are answered
before this gate (`wasmexec._server.http_app.OperationsApp`): probes need no token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken, TokenVerifier, principal_components
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.requests import HTTPConnection
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from wasmexec._audit import PRINCIPAL
from wasmexec._server.http_app import respond
from wasmexec._server.jwt_auth import JwtVerifier, KeysUnavailable
from wasmexec._server.tokenfile import TokenFileVerifier

#: What a client waits before retrying when the issuer's keys could not be fetched.
KEYS_RETRY_AFTER_S = 30
#: The longest principal name an audit line carries (a JWT ``sub`` is the issuer's to choose).
MAX_PRINCIPAL_CHARS = 300


def principal_name(token: AccessToken) -> str:
    """The principal as the operator reads it in the audit log: the token file's name, or ``subject @ issuer``."""
    _, issuer, subject = principal_components(token)
    name = subject or token.client_id
    return (name if issuer is None else f"{name} @ {issuer}")[:MAX_PRINCIPAL_CHARS]


@dataclass
class Authenticator:
    """The token verifiers of a server (each a `TokenVerifier`) and, in OAuth mode, its resource URL."""

    verifiers: Sequence[TokenVerifier]
    """Asked in order; the first to know a token names its principal."""
    jwt: JwtVerifier | None = None
    """The OAuth issuer's verifier (also in `verifiers`), when there is one."""
    resource: str | None = None
    """This server's URL as its clients reach it (RFC 9728 ``resource``): in OAuth mode only."""
    metadata_path: str | None = field(init=False, default=None)
    """Where the protected-resource metadata document is served."""

    def __post_init__(self) -> None:
        if self.jwt is not None and self.resource is not None:
            self.metadata_path = urlsplit(self.metadata_url).path

    @property
    def metadata_url(self) -> str:
        """The URL of the protected-resource metadata document (RFC 9728 §3.1, as the SDK builds it)."""
        assert self.resource is not None
        return str(build_resource_metadata_url(AnyHttpUrl(self.resource)))

    def describe(self) -> str:
        """How tokens are checked, for the start-up line."""
        parts = [f"token file: {len(verifier.principals)} principal(s)" for verifier in self.verifiers
                 if isinstance(verifier, TokenFileVerifier)]  # fmt: skip
        if self.jwt is not None:
            parts.append(f"OAuth issuer {self.jwt.issuer}, audience {self.jwt.audience}, "
                         f"resource metadata at {self.metadata_url}")  # fmt: skip
        return "; ".join(parts)

    async def verify_token(self, token: str) -> AccessToken | None:
        for verifier in self.verifiers:
            found = await verifier.verify_token(token)
            if found is not None:
                return found
        return None

    def metadata_route(self) -> Route | None:
        """The protected-resource metadata document (OAuth mode), served with the SDK's handler."""
        if self.jwt is None or self.resource is None or self.metadata_path is None:
            return None
        metadata = ProtectedResourceMetadata.model_validate(
            {"resource": self.resource, "authorization_servers": [self.jwt.issuer], "resource_name": "wasmexec"}
        )
        handler = ProtectedResourceMetadataHandler(metadata)
        return Route(self.metadata_path, endpoint=cors_middleware(handler.handle, ["GET", "OPTIONS"]),
                     methods=["GET", "OPTIONS"])  # fmt: skip


class AuthGate:
    """The ASGI app in front of the SDK's MCP app: lets through requests with a valid bearer token (see the module)."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = AuthContextMiddleware(app)  # sets the SDK's access-token context variable
        self.lifespan_app = app
        self.authenticator = authenticator
        self.backend = BearerAuthBackend(authenticator)
        self.metadata = authenticator.metadata_route()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.lifespan_app(scope, receive, send)
            return
        if self.metadata is not None and scope.get("path") == self.authenticator.metadata_path:
            await self.metadata.handle(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        header = connection.headers.get("authorization", "")
        if not header.lower().startswith("bearer "):
            await self._refuse(send, None)
            return
        try:
            verified = await self.backend.authenticate(connection)
        except KeysUnavailable as exc:
            await _respond_json(send, 503, {"error": "temporarily_unavailable", "error_description": str(exc)},
                                [(b"retry-after", str(KEYS_RETRY_AFTER_S).encode())])  # fmt: skip
            return
        if verified is None:
            await self._refuse(send, "the bearer token is not valid here (unknown, expired, or for another audience)")
            return
        credentials, user = verified
        scope["user"], scope["auth"] = user, credentials
        marker = PRINCIPAL.set(principal_name(user.access_token))
        try:
            await self.app(scope, receive, send)
        finally:
            PRINCIPAL.reset(marker)

    async def _refuse(self, send: Send, problem: str | None) -> None:
        """401 with the challenge; ``error`` only when a token was sent (RFC 6750 §3.1)."""
        if self.authenticator.resource is not None:
            challenge = [f'resource_metadata="{self.authenticator.metadata_url}"']
        else:
            challenge = ['realm="wasmexec"']
        body = {"error": "invalid_request", "error_description": "a bearer token is required"}
        if problem is not None:
            challenge += ['error="invalid_token"', f'error_description="{problem}"']
            body = {"error": "invalid_token", "error_description": problem}
        header = "Bearer " + ", ".join(challenge)
        await _respond_json(send, 401, body, [(b"www-authenticate", header.encode())])


async def _respond_json(send: Send, status: int, body: dict[str, str], headers: list[tuple[bytes, bytes]]) -> None:
    await respond(send, status, json.dumps(body).encode(), "application/json", headers)
