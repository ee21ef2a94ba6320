"""Test helpers for `serve --http` with authentication: a local OAuth issuer, minted tokens, authed MCP clients.

`LocalIssuer` is a tiny HTTP server on 127.0.0.1 that serves RFC 8414 metadata and a JWK set
(an RSA and an EC key, generated with `cryptography`); tokens are minted with PyJWT, and the
forged ones (``alg: none``, HS256 keyed with the public key) are built by hand, as an
attacker would.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import free_port

#: The JSON-RPC initialize request and headers of a 2025-era client (200 when the server lets it in).
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class SigningKey:
    """A private key with its kid and algorithm, and its public JWK."""

    def __init__(self, kid: str, kind: str = "RSA") -> None:
        self.kid = kid
        if kind == "RSA":
            self.private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.algorithm = "RS256"
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
            self.algorithm = "ES256"
            jwk = jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        self.jwk = {**jwk, "kid": kid, "use": "sig", "alg": self.algorithm}

    def public_pem(self) -> bytes:
        public = self.private.public_key()
        return bytes(public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


class LocalIssuer:
    """An authorization server's metadata and keys on 127.0.0.1 (`url` is its issuer)."""

    def __init__(self) -> None:
        self.keys = [SigningKey("rsa-1"), SigningKey("ec-1", "EC")]
        self.jwks_fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/oauth-authorization-server":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks",
                            "authorization_endpoint": issuer.url + "/authorize",
                            "token_endpoint": issuer.url + "/token", "response_types_supported": ["code"]}  # fmt: skip
                elif self.path == "/jwks":
                    issuer.jwks_fetches += 1
                    body = {"keys": [key.jwk for key in issuer.keys]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def mint(self, audience: str, *, key: SigningKey | None = None, subject: str = "alice", **claims: Any) -> str:
        """A token of this issuer signed with `key` (its RSA key by default); see `mint`."""
        return mint(self.url, audience, key or self.keys[0], subject=subject, **claims)


def mint(issuer: str, audience: str, key: SigningKey, *, subject: str = "alice", **claims: Any) -> str:
    """A token signed with `key`, valid for 5 minutes unless `claims` say otherwise (None leaves a claim out)."""
    now = int(time.time())
    body = {"iss": issuer, "aud": audience, "sub": subject, "iat": now, "exp": now + 300, **claims}
    body = {name: value for name, value in body.items() if value is not None}
    return jwt.encode(body, key.private, algorithm=key.algorithm, headers={"kid": key.kid})


def forged(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None = None) -> str:
    """A JWT built by hand: unsigned (``alg: none``) or HMAC-SHA256 with `secret`, as an attacker makes them."""
    signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
    signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def write_token_file(path: Path, entries: dict[str, str], mode: int = 0o600) -> Path:
    """A token file of `PRINCIPAL TOKEN` lines, with a comment and a blank line."""
    path.write_text("# principals of the test\n\n" + "".join(f"{p} {t}\n" for p, t in entries.items()))
    path.chmod(mode)
    return path


def new_token() -> str:
    return secrets.token_hex(24)


@contextmanager
def serving(
    *options: str, port: int | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> Iterator[str]:
    """`wasmexec serve --http` with `options` on a free loopback port; yields its /mcp URL once it serves.

    Waits for the "serving" line on stderr (not the clock); stderr after it is drained, so a
    chatty server never blocks. Stops the server at the end.
    """
    port = port or free_port()
    command = [sys.executable, "-m", "wasmexec", "serve", "--http", "--port", str(port), *options]
    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stderr is not None
    try:
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        for line in process.stderr:
            seen.append(line)
            if "serving run_python at" in line:
                break
            assert time.monotonic() < deadline, "".join(seen)
        else:
            raise AssertionError(f"{command} stopped before serving:\n{''.join(seen)}")
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stderr.close()


@asynccontextmanager
async def authed_client(url: str, token: str | None, mode: str = "auto", **options: Any) -> AsyncIterator[Client]:
    """A real MCP client that sends ``Authorization: Bearer token`` on every request."""
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, trust_env=False, timeout=60) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, **options) as client:  # type: ignore[arg-type]
            yield client


def post_initialize(url: str, token: str | None = None, **headers: str) -> httpx2.Response:
    """A raw 2025-era initialize POST (with the bearer token, when given)."""
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx2.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=60, trust_env=False)
