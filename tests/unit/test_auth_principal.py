"""Who a token makes the caller (`caller_key`) and what the audit log calls them (`principal_name`).

`caller_key` binds sessions, artifacts, vaults and paused runs; it must depend on the principal
only (not the token, not the process), so every replica, and every token of one principal, agree.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from tests.authserver import LocalIssuer, new_token
from wasmexec._server.auth import principal_name
from wasmexec._server.callers import caller_key
from wasmexec._server.jwt_auth import IssuerKeys, JwtVerifier
from wasmexec._server.tokenfile import TokenFileVerifier

AUDIENCE = "https://mcp.example/mcp"


def _caller(token: AccessToken) -> Any:
    marker = auth_context_var.set(AuthenticatedUser(token))
    try:
        return caller_key(None)  # type: ignore[arg-type]  # an authenticated request never needs the context
    finally:
        auth_context_var.reset(marker)


def _verified(verifier: Any, token: str) -> AccessToken:
    found = anyio.run(verifier.verify_token, token)
    assert found is not None
    return found


@pytest.fixture
def issuer() -> Any:
    local = LocalIssuer()
    yield local
    local.close()


def test_one_principal_is_one_caller_whatever_the_token_or_the_replica(issuer: LocalIssuer) -> None:
    first, second = new_token(), new_token()
    replicas = [TokenFileVerifier([("alice", first), ("alice", second)]) for _ in range(2)]
    assert len({_caller(_verified(replica, token)) for replica in replicas for token in (first, second)}) == 1
    jwt_replicas = [JwtVerifier(issuer.url, AUDIENCE, IssuerKeys(issuer.url)) for _ in range(2)]
    tokens = [issuer.mint(AUDIENCE), issuer.mint(AUDIENCE, key=issuer.keys[1], exp=2_000_000_000)]
    assert len({_caller(_verified(replica, token)) for replica in jwt_replicas for token in tokens}) == 1


def test_the_same_name_from_a_token_file_and_from_two_issuers_is_three_principals(issuer: LocalIssuer) -> None:
    token = new_token()
    from_file = _verified(TokenFileVerifier([("alice", token)]), token)
    from_issuer = _verified(JwtVerifier(issuer.url, AUDIENCE), issuer.mint(AUDIENCE, subject="alice"))
    other = LocalIssuer()
    try:
        from_other = _verified(JwtVerifier(other.url, AUDIENCE), other.mint(AUDIENCE, subject="alice"))
    finally:
        other.close()
    assert len({_caller(from_file), _caller(from_issuer), _caller(from_other)}) == 3
    assert principal_name(from_file) == "alice"
    assert principal_name(from_issuer) == f"alice @ {issuer.url}"
