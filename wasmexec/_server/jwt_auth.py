"""OAuth 2.1 resource-server mode (``serve --http --auth-issuer URL --auth-audience AUD``): JWT access tokens.

Per the MCP authorization spec, the server is a resource server: it never sees a password
or a client secret, it checks the access tokens an authorization server issued. Its keys
are found from the issuer alone: the issuer's metadata (RFC 8414
``/.well-known/oauth-authorization-server``, else OpenID Connect
``/.well-known/openid-configuration``), whose ``issuer`` must be the one configured, names
the ``jwks_uri``. A token is accepted only when:

- its ``alg`` is an asymmetric one in `ALLOWED_ALGORITHMS` (never ``none``, never ``HS*``:
  a public key must not become an HMAC secret) that fits the key its ``kid`` names;
- the signature verifies with that key; ``iss`` is the issuer, ``aud`` holds the audience,
  ``exp`` has not passed and ``nbf`` has (`LEEWAY_S` either way), and ``sub`` is present.

Keys are fetched with a deadline (`FETCH_TIMEOUT_S` for the whole fetch: an issuer that
hangs costs a request that long, never more) and never per request: the key set is kept
for `JWKS_TTL_S`; a ``kid`` it does not hold (the issuer rotated its keys) fetches it again
at once, but such fetches happen at most once every `MIN_REFETCH_INTERVAL_S`, so a flood of
made-up ``kid``\\ s cannot make the server hammer the issuer. When the keys were fetched once
and a later fetch fails, the keys held are kept. When no keys can be had at all, tokens
cannot be checked: `KeysUnavailable` (the HTTP layer answers 503, not 401: the token may be
fine).

The principal is (issuer, subject): the same ``sub`` from another issuer is someone else.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
from mcp.server.auth.provider import AccessToken

from wasmexec._exceptions import ConfigError

_log = logging.getLogger("wasmexec.auth")

#: Asymmetric signatures only: with a symmetric one the verifying key could sign too.
ALLOWED_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
                                "EdDSA"})  # fmt: skip
#: Clock skew tolerated on ``exp`` and ``nbf`` between this host and the issuer.
LEEWAY_S = 30
#: The most a fetch of the issuer's metadata or keys may take, start to end.
FETCH_TIMEOUT_S = 5.0
#: How long a fetched key set is used before it is fetched again (keys rotate slowly).
JWKS_TTL_S = 600.0
#: At most one fetch per this long for a ``kid`` the key set lacks, or after a failed fetch.
MIN_REFETCH_INTERVAL_S = 30.0
#: Metadata and key sets are small; a larger answer is not one.
MAX_DOCUMENT_BYTES = 256 * 1024
#: A token larger than this is refused before it is parsed.
MAX_TOKEN_CHARS = 16 * 1024
#: The header algorithms each kind of key verifies (a key's own ``alg``, when it has one, narrows this).
_ALGORITHMS_OF_KEY: dict[object, set[str]] = {
    "RSA": {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"},
    ("EC", "P-256"): {"ES256"}, ("EC", "P-384"): {"ES384"}, ("EC", "P-521"): {"ES512"},
    ("OKP", "Ed25519"): {"EdDSA"},
}  # fmt: skip


class KeysUnavailable(Exception):
    """The issuer's keys cannot be had now (see the module): the token cannot be checked either way."""


def check_issuer_url(url: str, what: str) -> str:
    """`url` if it is https (or http to a loopback host, for a local issuer); ConfigError otherwise."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and _is_loopback_name(parts.hostname):
        return url
    raise ConfigError(f"{what} {url!r}: expected an https:// URL (http:// only for a loopback host)")


def _is_loopback_name(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be, in the order the MCP spec's clients try them."""
    parts = urlsplit(issuer)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    urls = [f"{origin}/.well-known/oauth-authorization-server{path}"]
    if path:
        urls.append(f"{origin}/.well-known/openid-configuration{path}")
    urls.append(f"{origin}{path}/.well-known/openid-configuration")
    return urls


@dataclass(frozen=True)
class _Key:
    key: Any
    """The public key (a `cryptography` object)."""
    algorithms: frozenset[str]
    """The header algorithms it verifies."""


class IssuerKeys:
    """The issuer's signing keys by ``kid``, fetched and kept as the module says."""

    def __init__(
        self,
        issuer: str,
        *,
        client: Callable[[], httpx2.AsyncClient] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._client = client or (lambda: httpx2.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False))
        self._clock = clock
        self._lock = anyio.Lock()
        self._jwks_uri: str | None = None
        self._keys: dict[str | None, _Key] | None = None
        self._fetched_at = -float("inf")
        """When the key set was last fetched (successfully)."""
        self._refetched_at = -float("inf")
        """When a fetch was last made out of turn (an unknown kid) or last failed."""
        self.fetches = 0
        """Fetches of the key set attempted (for tests and logs)."""
        self.problem: str | None = "not fetched yet"
        """Why the last fetch failed (None: it worked)."""
        """Fetches of the key set attempted (for tests and logs)."""

    async def key(self, kid: str | None, algorithm: str) -> Any | None:
        """The public key for a token's ``kid`` and ``alg``; None when there is none that fits.

        Raises:
            KeysUnavailable: no keys were ever fetched, and fetching them now failed.
        """
        async with self._lock:
            now = self._clock()
            stale = now - self._fetched_at >= JWKS_TTL_S
            unknown = self._keys is not None and kid not in self._keys
            if (self._keys is None or stale or unknown) and now - self._refetched_at >= MIN_REFETCH_INTERVAL_S:
                if unknown and not stale:
                    self._refetched_at = now  # out of turn: the next such fetch waits for the interval
                await self._fetch(now)
            if self._keys is None:
                raise KeysUnavailable(f"the signing keys of {self.issuer} cannot be fetched: {self.problem}")
            found = self._keys.get(kid)
            if found is None and kid is None and len(self._keys) == 1:
                found = next(iter(self._keys.values()))  # a token without kid, an issuer with one key
        return found.key if found is not None and algorithm in found.algorithms else None

    async def _fetch(self, now: float) -> None:
        self.fetches += 1
        try:
            with anyio.fail_after(FETCH_TIMEOUT_S):
                async with self._client() as client:
                    if self._jwks_uri is None:
                        self._jwks_uri = await self._discover(client)
                    keys = _usable_keys(await _document(client, self._jwks_uri))
        except (OSError, TimeoutError, httpx2.HTTPError, ValueError, ConfigError) as exc:
            self._refetched_at = now  # a failing issuer is asked again only after the interval
            self.problem = str(exc) or type(exc).__name__
            _log.warning("wasmexec: cannot fetch the signing keys of %s: %s", self.issuer, self.problem)
            return
        self._keys, self._fetched_at, self.problem = keys, now, None

    async def _discover(self, client: httpx2.AsyncClient) -> str:
        """The issuer's ``jwks_uri``, from the first metadata document that answers."""
        for url in metadata_urls(self.issuer):
            try:
                metadata = await _document(client, url)
            except ValueError:
                continue  # not at this address: try the next
            if metadata.get("issuer") != self.issuer:
                raise ConfigError(f"the metadata at {url} names issuer {metadata.get('issuer')!r}, not {self.issuer!r}")
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str):
                raise ConfigError(f"the metadata at {url} has no jwks_uri")
            return check_issuer_url(jwks_uri, "jwks_uri")
        raise ValueError(f"no authorization server metadata for {self.issuer}")


async def _document(client: httpx2.AsyncClient, url: str) -> dict[str, Any]:
    """A JSON object at `url` (ValueError: not 200, too large, or not a JSON object)."""
    async with client.stream("GET", url, headers={"accept": "application/json"}) as response:
        if response.status_code != 200:
            raise ValueError(f"{url}: HTTP {response.status_code}")
        body = b""
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_DOCUMENT_BYTES:
                raise ValueError(f"{url}: over {MAX_DOCUMENT_BYTES} bytes")
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError(f"{url}: not a JSON object")
    return document


def _usable_keys(jwks: dict[str, Any]) -> dict[str | None, _Key]:
    """The signing keys of a JWK set by ``kid`` (symmetric, encryption-only and unreadable keys left out)."""
    found: dict[str | None, _Key] = {}
    members = jwks.get("keys")
    for member in members if isinstance(members, list) else []:
        if not isinstance(member, dict) or member.get("use", "sig") != "sig":
            continue
        kind, curve, alg = member.get("kty"), member.get("crv"), member.get("alg", "")
        if not all(isinstance(value, (str, type(None))) for value in (kind, curve, alg)):
            continue  # not a JWK (the issuer is trusted, its answer is still only parsed)
        algorithms = _ALGORITHMS_OF_KEY.get(kind if kind == "RSA" else (kind, curve), set())
        if alg:
            algorithms = algorithms & {alg}
        algorithms = algorithms & ALLOWED_ALGORITHMS
        if not algorithms:
            continue  # "oct" (a shared secret), an unknown curve, or an alg it cannot have
        try:
            key = jwt.PyJWK(member, algorithm=min(algorithms)).key
        except jwt.PyJWTError:
            continue
        kid = member.get("kid")
        found[kid if isinstance(kid, str) else None] = _Key(key, frozenset(algorithms))
    if not found:
        raise ValueError("the key set has no usable signing key")
    return found


class JwtVerifier:
    """The SDK's `TokenVerifier` for JWT access tokens of one issuer and audience (see the module)."""

    def __init__(self, issuer: str, audience: str, keys: IssuerKeys | None = None) -> None:
        self.issuer = check_issuer_url(issuer, "--auth-issuer")
        self.audience = audience
        self.keys = keys or IssuerKeys(issuer)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's principal; None when it is not valid here.

        Raises:
            KeysUnavailable: the issuer's keys cannot be fetched, so the token cannot be checked.
        """
        if len(token) > MAX_TOKEN_CHARS:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALLOWED_ALGORITHMS or not isinstance(kid, (str, type(None))):
            return None
        key = await self.keys.key(kid, algorithm)
        if key is None:
            return None
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm], audience=self.audience, issuer=self.issuer,
                                leeway=LEEWAY_S, options={"require": ["exp", "iss", "aud", "sub"]})  # fmt: skip
        except jwt.PyJWTError:
            return None
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            return None
        scope = claims.get("scope")
        scopes = scope.split() if isinstance(scope, str) else []
        return AccessToken(token=token, client_id=f"{subject} @ {self.issuer}", scopes=scopes,
                           expires_at=int(claims["exp"]), subject=subject, claims={"iss": self.issuer})  # fmt: skip
