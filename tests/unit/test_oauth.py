import json
import stat
from pathlib import Path

import anyio
import httpx2
import pytest

from wasmexec._tools import oauth
from wasmexec._tools.config import ServerConfig, check_oauth_settings, parse_config
from wasmexec._tools.transports import bound_reply


def _server(entry: dict[str, object]) -> ServerConfig:
    return parse_config({"mcpServers": {"s": entry}}, environ={"SECRET": "client-secret-123"}).servers["s"]


def test_oauth_is_offered_unless_turned_off_or_a_token_is_configured() -> None:
    assert oauth.wanted(_server({"url": "https://h/mcp"}))
    assert not oauth.wanted(_server({"url": "https://h/mcp", "oauth": False}))
    assert not oauth.wanted(_server({"url": "https://h/mcp", "headers": {"authorization": "Bearer x"}}))
    assert oauth.wanted(_server({"url": "https://h/mcp", "headers": {"Authorization": "x"}, "oauth": {}}))


def test_oauth_settings_are_checked_and_expanded_and_the_client_secret_is_redacted() -> None:
    server = _server({"url": "https://h/mcp", "oauth": {"client_id": "abc", "client_secret": "${SECRET}",
                                                        "redirect_port": 33418}})  # fmt: skip
    assert server.oauth == {"client_id": "abc", "client_secret": "client-secret-123", "redirect_port": 33418}
    assert "client-secret-123" in server.secrets()
    for bad, message in (({"port": 1}, "unknown setting 'port'"), ({"redirect_port": 0}, "a port number"),
                         ({"redirect_port": True}, "a port number"), ({"scope": 3}, "must be str")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            check_oauth_settings(bad)


def test_tokens_are_stored_privately_one_file_per_server_and_told_to_the_redactor(tmp_path: Path) -> None:
    from mcp.shared.auth import OAuthToken

    server = _server({"url": "https://h/mcp"})
    path = oauth.token_file(tmp_path / "oauth", server)
    assert path.name.startswith("s-") and path != oauth.token_file(
        tmp_path / "oauth", _server({"url": "https://o/mcp"})
    )
    told: list[str] = []
    storage = oauth.FileTokenStorage(path, told.append)
    assert anyio.run(storage.get_tokens) is None
    anyio.run(storage.set_tokens, OAuthToken(access_token="at-1", refresh_token="rt-1", expires_in=60))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert told == ["at-1", "rt-1"]
    again: list[str] = []
    reread = oauth.FileTokenStorage(path, again.append)
    assert again == ["at-1", "rt-1"]  # a later process redacts the stored tokens too
    assert anyio.run(reread.get_tokens).access_token == "at-1"  # type: ignore[union-attr]
    path.write_text("{corrupt")
    assert anyio.run(oauth.FileTokenStorage(path).get_tokens) is None  # start over, never fail


def _reply(status: int, body: bytes, **headers: str) -> dict[str, object]:
    request = httpx2.Request("POST", "http://127.0.0.1:1/mcp")
    response = httpx2.Response(status, headers=headers, stream=httpx2.ByteStream(body), request=request)

    async def main() -> bytes:
        await bound_reply(response)
        return bytes(await response.aread())

    return dict(json.loads(anyio.run(main)))


def test_a_401_says_why_and_how_to_sign_in_but_a_json_rpc_error_body_is_kept() -> None:
    challenge = 'Bearer error="invalid_token", error_description="Token expired", resource_metadata="http://h/x"'
    said = _reply(401, b'{"error": "invalid_token"}', **{"content-type": "application/json",
                                                          "www-authenticate": challenge})  # fmt: skip
    message = said["error"]["message"]  # type: ignore[index]
    assert "401 Unauthorized" in message and "(Token expired)" in message and "config login" in message
    own = b'{"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "no such tenant"}}'
    assert _reply(403, own, **{"content-type": "application/json"})["error"]["message"] == "no such tenant"  # type: ignore[index]


def _first_step_after_401(server: ServerConfig, challenge: str, tmp_path: Path) -> httpx2.Request | None:
    """What the provider sends after the server's first answer is a 401 with `challenge` (None: nothing)."""
    auth = oauth.provider(server, token_dir=tmp_path)
    assert auth is not None
    request = httpx2.Request("POST", "https://h/mcp")

    async def main() -> httpx2.Request | None:
        flow = auth.async_auth_flow(request)
        sent = await flow.__anext__()
        assert sent is request
        refused = httpx2.Response(401, headers={"www-authenticate": challenge}, content=b"{}", request=request)
        try:
            return await flow.asend(refused)
        except StopAsyncIteration:
            return None
        finally:
            await flow.aclose()

    return anyio.run(main)


def test_a_sign_in_starts_only_when_the_401_names_resource_metadata_unless_oauth_is_configured(
    tmp_path: Path,
) -> None:
    plain = 'Bearer error="invalid_token"'
    named = 'Bearer error="invalid_token", resource_metadata="https://h/.well-known/oauth-protected-resource/mcp"'
    assert _first_step_after_401(_server({"url": "https://h/mcp"}), plain, tmp_path) is None  # reported as it is
    discovery = _first_step_after_401(_server({"url": "https://h/mcp"}), named, tmp_path)
    assert discovery is not None and discovery.url.path == "/.well-known/oauth-protected-resource/mcp"
    explicit = _first_step_after_401(_server({"url": "https://h/mcp", "oauth": True}), plain, tmp_path)
    assert explicit is not None and "oauth-protected-resource" in str(explicit.url)  # the SDK's fallbacks


def test_an_event_stream_fails_once_one_event_passes_the_cap_however_it_is_split() -> None:
    from wasmexec._tools.transports import MAX_MESSAGE_BYTES, _CappedEvents

    async def read(chunks: list[bytes]) -> int:
        class Inner(httpx2.AsyncByteStream):
            async def __aiter__(self):  # type: ignore[no-untyped-def]
                for chunk in chunks:
                    yield chunk

        return sum([len(chunk) async for chunk in _CappedEvents(Inner())])

    event = b"data: " + b"y" * (MAX_MESSAGE_BYTES // 2) + b"\n\n"
    assert anyio.run(read, [event] * 5) == 5 * len(event)  # many events, each under the cap
    assert anyio.run(read, [event[:-1], b"\n" + event]) == 2 * len(event)  # a separator split across chunks
    with pytest.raises(httpx2.StreamError, match="reply too large"):
        anyio.run(read, [event[:-2]] * 3)  # one event that never ends


def _first_request(server: ServerConfig, tmp_path: Path) -> httpx2.Request:
    auth = oauth.provider(server, token_dir=tmp_path)
    assert auth is not None

    async def main() -> httpx2.Request:
        flow = auth.async_auth_flow(httpx2.Request("POST", "https://h/mcp"))
        try:
            return await flow.__anext__()
        finally:
            await flow.aclose()

    return anyio.run(main)


def test_a_stored_token_that_expired_is_refreshed_before_it_is_sent_even_in_a_new_process(tmp_path: Path) -> None:
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

    server = _server({"url": "https://h/mcp"})
    storage = oauth.FileTokenStorage(oauth.token_file(tmp_path, server))
    anyio.run(storage.set_client_info, OAuthClientInformationFull(client_id="c1", redirect_uris=None))
    anyio.run(storage.set_tokens, OAuthToken(access_token="at-fresh", refresh_token="rt-1", expires_in=3600))
    fresh = _first_request(server, tmp_path)
    assert fresh.url.path == "/mcp" and fresh.headers["authorization"] == "Bearer at-fresh"
    anyio.run(storage.set_tokens, OAuthToken(access_token="at-old", refresh_token="rt-1", expires_in=0))
    refresh = _first_request(server, tmp_path)  # a new provider: as a later process would make it
    assert refresh.url.path == "/token" and b"grant_type=refresh_token" in refresh.read()
