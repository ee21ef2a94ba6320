"""Key fetching of the OAuth mode (`wasmexec._server.jwt_auth.IssuerKeys`): kept, refreshed, bounded.

A real local issuer (`tests.authserver.LocalIssuer`) and an injected clock: no waiting.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from tests.authserver import LocalIssuer, SigningKey
from wasmexec._server.jwt_auth import (
    JWKS_TTL_S,
    MIN_REFETCH_INTERVAL_S,
    IssuerKeys,
    JwtVerifier,
    KeysUnavailable,
    metadata_urls,
)

AUDIENCE = "https://mcp.example/mcp"


@pytest.fixture
def issuer() -> Iterator[LocalIssuer]:
    local = LocalIssuer()
    yield local
    local.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _verifier(issuer: LocalIssuer, clock: Clock) -> JwtVerifier:
    return JwtVerifier(issuer.url, AUDIENCE, IssuerKeys(issuer.url, clock=clock))


def test_keys_are_fetched_once_and_again_only_after_their_ttl(issuer: LocalIssuer) -> None:
    clock = Clock()
    verifier = _verifier(issuer, clock)
    token = issuer.mint(AUDIENCE)
    for _ in range(5):
        assert anyio.run(verifier.verify_token, token) is not None
    assert issuer.jwks_fetches == 1
    clock.now += JWKS_TTL_S
    assert anyio.run(verifier.verify_token, token) is not None
    assert issuer.jwks_fetches == 2


def test_an_unknown_kid_fetches_at_once_but_at_most_once_per_interval(issuer: LocalIssuer) -> None:
    clock = Clock()
    verifier = _verifier(issuer, clock)
    assert anyio.run(verifier.verify_token, issuer.mint(AUDIENCE)) is not None
    new, newer = SigningKey("new", "EC"), SigningKey("newer", "EC")
    issuer.keys.append(new)
    assert anyio.run(verifier.verify_token, issuer.mint(AUDIENCE, key=new)) is not None
    issuer.keys.append(newer)
    assert anyio.run(verifier.verify_token, issuer.mint(AUDIENCE, key=newer)) is None  # too soon
    assert issuer.jwks_fetches == 2
    clock.now += MIN_REFETCH_INTERVAL_S
    assert anyio.run(verifier.verify_token, issuer.mint(AUDIENCE, key=newer)) is not None


def test_keys_held_are_kept_when_the_issuer_goes_away(issuer: LocalIssuer) -> None:
    clock = Clock()
    verifier = _verifier(issuer, clock)
    token = issuer.mint(AUDIENCE)
    assert anyio.run(verifier.verify_token, token) is not None
    issuer.close()
    clock.now += JWKS_TTL_S
    assert anyio.run(verifier.verify_token, token) is not None


def test_metadata_naming_another_issuer_is_not_trusted(issuer: LocalIssuer) -> None:
    impostor = issuer.url.replace("127.0.0.1", "localhost")  # the metadata says 127.0.0.1
    verifier = JwtVerifier(impostor, AUDIENCE, IssuerKeys(impostor, clock=Clock()))
    with pytest.raises(KeysUnavailable, match="names issuer"):
        anyio.run(verifier.verify_token, issuer.mint(AUDIENCE, iss=impostor))


def test_metadata_is_looked_up_where_rfc_8414_and_openid_connect_put_it() -> None:
    assert metadata_urls("https://idp.example/realms/x") == [
        "https://idp.example/.well-known/oauth-authorization-server/realms/x",
        "https://idp.example/.well-known/openid-configuration/realms/x",
        "https://idp.example/realms/x/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://idp.example") == [
        "https://idp.example/.well-known/oauth-authorization-server",
        "https://idp.example/.well-known/openid-configuration",
    ]


def test_a_key_set_with_odd_members_keeps_only_the_usable_signing_keys(issuer: LocalIssuer) -> None:
    from wasmexec._server.jwt_auth import _usable_keys

    rsa = issuer.keys[0].jwk
    odd = [
        {"kty": ["RSA"]}, {"kty": "EC", "crv": ["P-256"]}, {**rsa, "alg": ["RS256"], "kid": "list-alg"},
        {"kty": "oct", "k": "c2VjcmV0", "kid": "secret"}, {**rsa, "use": "enc", "kid": "enc"},
        {**rsa, "alg": "HS256", "kid": "hs"}, "not a key", {**rsa, "n": "!!", "kid": "broken"},
    ]  # fmt: skip
    assert set(_usable_keys({"keys": [*odd, rsa]})) == {"rsa-1"}
    with pytest.raises(ValueError):
        _usable_keys({"keys": odd})
