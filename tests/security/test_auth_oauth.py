"""`serve --http --auth-issuer --auth-audience`: only JWTs the issuer signed for this server get in.

A real `wasmexec serve --http` process and a real local authorization server (`LocalIssuer`:
RFC 8414 metadata and a JWK set with an RSA and an EC key on 127.0.0.1). Each forged or
misdirected token is what an attacker would try; each must get 401 with the RFC 6750
challenge that points at the protected-resource metadata (RFC 9728).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from mcp import MCPError

from tests.authserver import (
    LocalIssuer,
    SigningKey,
    authed_client,
    forged,
    mint,
    new_token,
    post_initialize,
    serving,
    write_token_file,
)
from tests.helpers import data_of, free_port
from wasmexec import Runtime
from wasmexec._server.resources import artifact_uri

SERVICE = "alice-service-token-" + new_token()


@pytest.fixture(scope="module")
def built() -> None:
    Runtime().build()


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalIssuer]:
    local = LocalIssuer()
    yield local
    local.close()


@pytest.fixture(scope="module")
def server(issuer: LocalIssuer, built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("oauth")
    port = free_port()
    audience = f"http://127.0.0.1:{port}/mcp"
    tokens = write_token_file(tmp / "tokens", {"alice": SERVICE})
    with serving("--auth-issuer", issuer.url, "--auth-audience", audience, "--auth-token-file", str(tokens),
                 "--audit-log", str(tmp / "audit.jsonl"), port=port) as url:  # fmt: skip
        yield {"url": url, "audience": audience, "audit": tmp / "audit.jsonl"}


def _run(body: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            return await body()

    return anyio.run(main)


def _metadata_url(server: dict[str, Any]) -> str:
    return server["url"].removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp"


@pytest.mark.parametrize("key", [0, 1], ids=["RS256", "ES256"])
def test_a_valid_token_runs_code_and_the_audit_names_subject_and_issuer(
    issuer: LocalIssuer, server: dict[str, Any], key: int
) -> None:
    token = issuer.mint(server["audience"], key=issuer.keys[key], subject=f"user-{key}")

    async def body() -> Any:
        async with authed_client(server["url"], token) as client:
            return (await client.call_tool("run_python", {"code": "result = 6 * 7"})).structured_content

    result = _run(body)
    assert data_of(result) == 42
    lines = [json.loads(line) for line in server["audit"].read_text().splitlines()]
    [line] = [line for line in lines if line["run_id"] == result["run_id"]]
    assert line["principal"] == f"user-{key} @ {issuer.url}"
    assert token not in server["audit"].read_text()


def test_no_token_gets_401_pointing_at_the_resource_metadata(server: dict[str, Any]) -> None:
    response = post_initialize(server["url"])
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{_metadata_url(server)}"'


def test_the_protected_resource_metadata_names_this_server_and_its_issuer(
    issuer: LocalIssuer, server: dict[str, Any]
) -> None:
    response = httpx2.get(_metadata_url(server), trust_env=False)
    assert response.status_code == 200
    document = response.json()
    assert document["resource"] == server["audience"]
    assert document["authorization_servers"] == [issuer.url]
    assert document["bearer_methods_supported"] == ["header"]


def test_health_and_metrics_need_no_token(server: dict[str, Any]) -> None:
    base = server["url"].removesuffix("/mcp")
    assert httpx2.get(base + "/healthz", trust_env=False).status_code == 200
    assert httpx2.get(base + "/metrics", trust_env=False).status_code == 200


def _bad_tokens(issuer: LocalIssuer, audience: str) -> dict[str, str]:
    now = int(time.time())
    rsa = issuer.keys[0]
    claims = {"iss": issuer.url, "aud": audience, "sub": "mallory", "exp": now + 300}
    impostor = SigningKey("rsa-1")  # same kid, another key: a bad signature
    stranger = SigningKey("no-such-kid")
    valid = issuer.mint(audience)
    head, _, signature = valid.split(".")
    return {
        "expired": issuer.mint(audience, exp=now - 120),  # past the leeway
        "not-yet-valid": issuer.mint(audience, nbf=now + 600),
        "wrong-audience": issuer.mint("https://other.example/mcp"),
        "wrong-issuer": issuer.mint(audience, iss="https://evil.example"),
        "no-subject": issuer.mint(audience, sub=None),
        "no-expiry": issuer.mint(audience, exp=None),
        "bad-signature": jwt.encode(claims, impostor.private, algorithm="RS256", headers={"kid": "rsa-1"}),
        "tampered-claims": ".".join([head, forged({}, {**claims, "sub": "admin"}).split(".")[1], signature]),
        "alg-none": forged({"alg": "none", "typ": "JWT", "kid": "rsa-1"}, claims),
        "alg-none-no-kid": forged({"alg": "none"}, claims),
        "hs256-with-the-public-key": forged({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims, rsa.public_pem()),
        "hs256-with-the-jwk": forged({"alg": "HS256", "kid": "rsa-1"}, claims, json.dumps(rsa.jwk).encode()),
        "unknown-kid": jwt.encode(claims, stranger.private, algorithm="RS256", headers={"kid": "no-such-kid"}),
        "rsa-alg-on-the-ec-kid": jwt.encode(claims, rsa.private, algorithm="RS256", headers={"kid": "ec-1"}),
        "garbage": "a.b.c",
        "huge": "x" * 20_000,
    }


BAD = ["expired", "not-yet-valid", "wrong-audience", "wrong-issuer", "no-subject", "no-expiry", "bad-signature",
       "tampered-claims", "alg-none", "alg-none-no-kid", "hs256-with-the-public-key", "hs256-with-the-jwk",
       "unknown-kid", "rsa-alg-on-the-ec-kid", "garbage", "huge"]  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_a_forged_or_misdirected_token_gets_401_invalid_token(
    issuer: LocalIssuer, server: dict[str, Any], case: str
) -> None:
    response = post_initialize(server["url"], _bad_tokens(issuer, server["audience"])[case])
    assert response.status_code == 401, response.text
    challenge = response.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge and f'resource_metadata="{_metadata_url(server)}"' in challenge


def test_the_same_request_with_a_valid_token_gets_in(issuer: LocalIssuer, server: dict[str, Any]) -> None:
    """The control of the test above: its 401s come from the tokens, not from the request."""
    assert post_initialize(server["url"], issuer.mint(server["audience"])).status_code == 200


def test_a_flood_of_unknown_kids_fetches_the_keys_at_most_once_more(
    issuer: LocalIssuer, server: dict[str, Any]
) -> None:
    assert post_initialize(server["url"], issuer.mint(server["audience"])).status_code == 200
    before = issuer.jwks_fetches
    strangers = [SigningKey(f"kid-{n}", "EC") for n in range(20)]
    for key in strangers:
        assert post_initialize(server["url"], issuer.mint(server["audience"], key=key)).status_code == 401
    assert issuer.jwks_fetches - before <= 1


def test_a_token_file_principal_and_a_jwt_subject_of_the_same_name_are_different_principals(
    issuer: LocalIssuer, server: dict[str, Any]
) -> None:
    async def body() -> Any:
        async with authed_client(server["url"], SERVICE) as service, \
                authed_client(server["url"], issuer.mint(server["audience"], subject="alice")) as person:  # fmt: skip
            made = await service.call_tool("run_python", {"code": "open('/workspace/a.txt', 'w').write('x')"})
            assert made.structured_content is not None
            with pytest.raises(MCPError):
                await person.read_resource(artifact_uri(made.structured_content["run_id"], "a.txt"))
            return await service.read_resource(artifact_uri(made.structured_content["run_id"], "a.txt"))

    assert _run(body).contents[0].text == "x"


def test_a_new_signing_key_is_picked_up_when_a_token_names_it(built: None) -> None:
    issuer = LocalIssuer()
    try:
        port = free_port()
        audience = f"http://127.0.0.1:{port}/mcp"
        with serving("--auth-issuer", issuer.url, "--auth-audience", audience, "--no-audit", port=port) as url:
            assert post_initialize(url, issuer.mint(audience)).status_code == 200
            rotated = SigningKey("rsa-2")
            issuer.keys = [rotated, issuer.keys[1]]  # the issuer rotates: rsa-1 is gone
            assert post_initialize(url, issuer.mint(audience, key=rotated)).status_code == 200
            assert issuer.jwks_fetches == 2
    finally:
        issuer.close()


def test_an_issuer_that_is_down_gets_503_at_once_and_the_server_keeps_serving(built: None) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    with serving("--auth-issuer", nobody, "--auth-audience", "https://mcp.example/mcp", "--no-audit") as url:
        started = time.monotonic()
        response = post_initialize(url, "a.b.c")  # refused before the keys are needed: not a JWT
        assert response.status_code == 401
        response = post_initialize(url, mint(nobody, "https://mcp.example/mcp", SigningKey("rsa-1")))
        assert response.status_code == 503 and response.headers["retry-after"]
        assert response.json()["error"] == "temporarily_unavailable" and nobody in response.text
        assert time.monotonic() - started < 10
        base = url.removesuffix("/mcp")
        assert httpx2.get(base + "/healthz", trust_env=False).status_code == 200


def test_an_issuer_that_never_answers_costs_a_request_the_fetch_deadline_not_a_hang(built: None) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        hung = f"http://127.0.0.1:{silent.getsockname()[1]}"
        token = mint(hung, "https://mcp.example/mcp", SigningKey("rsa-1"))
        with serving("--auth-issuer", hung, "--auth-audience", "https://mcp.example/mcp", "--no-audit") as url:
            started = time.monotonic()
            response = post_initialize(url, token)
            elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert elapsed < 15  # the fetch deadline (5 s) and start-up slack, never the client's 60 s


@pytest.mark.parametrize(
    ("options", "words"),
    [(("--auth-issuer", "ftp://idp.example", "--auth-audience", "https://mcp.example/mcp"), ("https://",)),
     (("--auth-issuer", "http://idp.example", "--auth-audience", "https://mcp.example/mcp"), ("loopback",)),
     (("--auth-issuer", "https://idp.example", "--auth-audience", "wasmexec"), ("--auth-resource",)),
     (("--auth-resource", "https://mcp.example/mcp"), ("--auth-issuer",))],
    ids=["not-http", "plain-http-remote", "audience-not-a-url", "resource-alone"],
)  # fmt: skip
def test_an_issuer_setting_that_cannot_work_is_refused_at_start(
    tmp_path: Path, options: tuple[str, ...], words: tuple[str, ...]
) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "wasmexec", "serve", "--no-audit", "--http", *options],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert all(word in done.stderr for word in words), done.stderr
