"""OAuth for upstream streamable HTTP servers, through the `mcp` SDK's `OAuthClientProvider`.

The provider is an ``httpx2.Auth`` on the server's HTTP client (`transports.http_transport`).
It sends the stored access token, refreshes it when it has expired, and on a 401 walks the
MCP authorization flow: protected resource metadata (the ``WWW-Authenticate`` header's
``resource_metadata``), authorization server metadata, dynamic client registration (or the
configured ``client_id``), PKCE authorization and the token exchange.

The one step that needs a person is the authorization: wasmexec prints the URL to open (on
stderr, with the server's name) and listens on a loopback redirect URI,
``http://127.0.0.1:PORT/callback`` (RFC 8252 §7.3), for the browser to come back with the
code. ``wasmexec config login SERVER`` does this ahead of time, with `LOGIN_TIMEOUT_S` to finish;
a run or `serve` that finds no usable token does it within the server's connect timeout.

Tokens and the client registration live in the user state dir (``oauth/<server>-<hash>.json``,
the directory 0700 and each file 0600, written atomically), one file per server id and URL.
The sandbox never sees them: the guest has no files, and the tokens travel only in the host's
``Authorization`` headers; each access and refresh token is also given to the redactor, so a
server that echoes one back finds it replaced in everything a run returns.

Config (per HTTP server)::

    "oauth": {"client_id": "…", "client_secret": "${SECRET}", "scope": "read write",
              "redirect_port": 33418}        # all optional
    "oauth": false                            # never, even on a 401

Without ``"oauth"``, a server gets the provider unless its ``headers`` carry an
``Authorization`` (a configured token is never replaced), and it signs in only when the server
answers 401 naming its protected resource metadata (``WWW-Authenticate: Bearer
resource_metadata="…"``, as the MCP authorization spec has servers do); any other 401 is
reported as it is. With ``"oauth"`` set, every 401 starts the flow (the SDK's own rule, with
its fallbacks for servers that predate resource metadata).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, urlsplit

import anyio

if TYPE_CHECKING:
    import httpx2
    from anyio.abc import SocketListener, SocketStream
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

    from wasmexec._tools.config import ServerConfig

#: How long `wasmexec config login` waits for the user to finish in the browser.
LOGIN_TIMEOUT_S = 300.0
#: The loopback redirect's path.
CALLBACK_PATH = "/callback"
#: The browser's request line and headers are read up to this many bytes (the code and state are short).
MAX_CALLBACK_BYTES = 16 * 1024
_PAGE = "<!doctype html><title>wasmexec</title><p>{}</p>"


def wanted(config: ServerConfig) -> bool:
    """Whether `config`'s HTTP client gets the OAuth provider (see the module docstring)."""
    if config.oauth is not None:
        return config.oauth.get("enabled", True) is not False
    return not any(name.lower() == "authorization" for name in config.headers)


def default_token_dir() -> Path:
    """``oauth/`` in the user state dir (beside the audit log)."""
    from wasmexec._audit import default_audit_path

    return default_audit_path().parent / "oauth"


def token_file(directory: Path, config: ServerConfig) -> Path:
    """The file of one server's tokens: its id (made safe) and a hash of its id and URL."""
    digest = hashlib.sha256(f"{config.server_id}\n{config.url}".encode()).hexdigest()[:16]
    return directory / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', config.server_id)[:40]}-{digest}.json"


class FileTokenStorage:
    """The SDK's `TokenStorage` in one private JSON file: ``{"tokens": …, "client_info": …}``."""

    def __init__(self, path: Path, on_secret: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._on_secret = on_secret
        tokens = self._read().get("tokens") or {}
        for key in ("access_token", "refresh_token"):
            if isinstance(tokens.get(key), str) and on_secret is not None:
                on_secret(tokens[key])

    def _read(self) -> dict[str, Any]:
        try:
            value = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: the flow starts over and rewrites it
        return value if isinstance(value, dict) else {}

    def _write(self, key: str, value: dict[str, Any]) -> None:
        data = {**self._read(), key: value}
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path.parent, 0o700)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(temporary, self.path)

    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken

        stored = self._read().get("tokens")
        if not isinstance(stored, dict):
            return None
        expires_at = stored.pop("expires_at", None)
        if isinstance(expires_at, (int, float)):  # what is left of its lifetime, not what it was issued with
            stored["expires_in"] = max(0, int(expires_at - time.time()))
        return OAuthToken.model_validate(stored)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        for secret in (tokens.access_token, tokens.refresh_token):
            if secret and self._on_secret is not None:
                self._on_secret(secret)
        stored = tokens.model_dump(mode="json", exclude_none=True)
        if tokens.expires_in is not None:
            stored["expires_at"] = time.time() + int(tokens.expires_in)
        self._write("tokens", stored)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        stored = self._read().get("client_info")
        return OAuthClientInformationFull.model_validate(stored) if isinstance(stored, dict) else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._write("client_info", client_info.model_dump(mode="json", exclude_none=True))

    def stored_redirect_port(self) -> int | None:
        """The port of the redirect URI the stored registration was made with (it must stay the same)."""
        uris = (self._read().get("client_info") or {}).get("redirect_uris") or []
        port = urlsplit(str(uris[0])).port if uris else None
        return port


class LoopbackRedirect:
    """The redirect URI: prints the authorization URL, then takes the browser's redirect on 127.0.0.1:PORT."""

    def __init__(self, server_id: str, port: int, announce: Callable[[str], None], timeout: float) -> None:
        self.server_id = server_id
        self.port = port
        self._announce = announce
        self._timeout = timeout
        self._listener: SocketListener | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    async def redirect_handler(self, authorization_url: str) -> None:
        """Listens first (the browser may be quick), then says where to go."""
        try:
            listeners = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
            self._listener = cast("SocketListener", listeners.listeners[0])  # one address: one listener
        except OSError as exc:
            raise OSError(f"cannot listen on {self.uri} for the OAuth redirect: {exc.strerror or exc}") from exc
        self._announce(f"wasmexec: server {self.server_id!r} needs you to sign in: open\n  {authorization_url}\n"
                       f"in a browser on this machine (waiting up to {self._timeout:g} s for the redirect to "
                       f"{self.uri})")  # fmt: skip

    async def callback_handler(self) -> AuthorizationCodeResult:
        """Waits for the redirect carrying the code (or an error); any other request gets a 404."""
        from mcp.client.auth import OAuthFlowError

        listener, self._listener = self._listener, None
        if listener is None:
            raise OAuthFlowError("the OAuth redirect listener is not running")
        try:
            with anyio.fail_after(self._timeout):
                while True:
                    async with await listener.accept() as stream:
                        found = await _answer(stream)
                    if found is not None:
                        return found
        except TimeoutError:
            raise OAuthFlowError(f"no sign-in for server {self.server_id!r} within {self._timeout:g} s") from None
        finally:
            await listener.aclose()


async def _answer(stream: SocketStream) -> AuthorizationCodeResult | None:
    """Reads one request; the code and state of a redirect to `CALLBACK_PATH`, else None (after a 404)."""
    from mcp.client.auth import OAuthFlowError
    from mcp.shared.auth import AuthorizationCodeResult

    head = b""
    with anyio.move_on_after(30):
        while b"\r\n\r\n" not in head and len(head) < MAX_CALLBACK_BYTES:
            try:
                head += await stream.receive(4096)
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                break
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    target = urlsplit(parts[1]) if len(parts) == 3 and parts[0] == "GET" else None
    if target is None or target.path != CALLBACK_PATH:
        await _reply(stream, 404, "Not the OAuth redirect.")
        return None
    query = {key: values[0] for key, values in parse_qs(target.query).items()}
    if "error" in query:
        await _reply(stream, 400, "Sign-in failed; see the terminal.")
        raise OAuthFlowError(f"the authorization server refused: {query['error']} {query.get('error_description', '')}")
    await _reply(stream, 200, "Signed in. You can close this window and go back to wasmexec.")
    return AuthorizationCodeResult(code=query.get("code", ""), state=query.get("state"), iss=query.get("iss"))


async def _reply(stream: SocketStream, status: int, text: str) -> None:
    body = _PAGE.format(text).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await stream.send(head.encode() + b"Connection: close\r\n\r\n" + body)


def free_port() -> int:
    """A loopback port nobody listens on now (the redirect URI is registered before it is listened on)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def provider(
    config: ServerConfig,
    *,
    token_dir: Path | None = None,
    announce: Callable[[str], None] | None = None,
    timeout: float = LOGIN_TIMEOUT_S,
    on_secret: Callable[[str], None] | None = None,
) -> httpx2.Auth | None:
    """The SDK's OAuth provider for one HTTP server, or None when it should not get one (`wanted`).

    Args:
        config: the server (its `oauth` settings).
        token_dir: where token files live (default: `default_token_dir()`).
        announce: shows the sign-in URL to the user (default: a line on stderr).
        timeout: how long the sign-in may take once the URL is shown.
        on_secret: receives every access and refresh token (the redactor's `add_secret`).
    """
    from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
    from pydantic import AnyUrl

    if config.url is None or not wanted(config):
        return None
    settings = config.oauth or {}
    storage = FileTokenStorage(token_file(token_dir or default_token_dir(), config), on_secret)
    port = settings.get("redirect_port") or storage.stored_redirect_port() or free_port()
    redirect = LoopbackRedirect(config.server_id, port, announce or _to_stderr, timeout)
    secret = settings.get("client_secret")
    metadata = OAuthClientMetadata(
        client_name=settings.get("client_name", "wasmexec"), redirect_uris=[AnyUrl(redirect.uri)],
        grant_types=["authorization_code", "refresh_token"], response_types=["code"], scope=settings.get("scope"),
        token_endpoint_auth_method="client_secret_post" if secret else "none",
    )  # fmt: skip
    if settings.get("client_id") and storage.stored_redirect_port() is None:
        # A client registered by hand: no dynamic registration, the flow uses these credentials.
        storage._write("client_info", OAuthClientInformationFull(
            client_id=settings["client_id"], client_secret=secret, redirect_uris=[AnyUrl(redirect.uri)],
            token_endpoint_auth_method="client_secret_post" if secret else "none",
        ).model_dump(mode="json", exclude_none=True))  # fmt: skip
    kind = _provider_class(only_when_asked=config.oauth is None)
    return kind(config.url, metadata, storage, redirect_handler=redirect.redirect_handler,
                callback_handler=redirect.callback_handler)  # fmt: skip


@functools.cache
def _provider_class(*, only_when_asked: bool) -> type[OAuthClientProvider]:
    """The SDK's provider with two changes, made once (the SDK is imported only when an HTTP server connects).

    - Stored tokens keep their expiry: the SDK loads them as if they never expired, so after a restart
      an expired access token was sent, refused, and answered with a new sign-in in the browser
      although a refresh token was stored. Here it is refreshed first, as within one process.
    - With ``only_when_asked`` (an entry that says nothing about OAuth), a sign-in starts only on a 401
      that names protected resource metadata; any other 401 (a wrong API key, say) is answered as it is.
    """
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.utils import extract_resource_metadata_from_www_auth

    asked_only = only_when_asked

    class Provider(OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            if self.context.current_tokens is not None and self.context.current_tokens.expires_in is not None:
                self.context.update_token_expiry(self.context.current_tokens)

        async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
            flow = super()._auth_flow(request)
            try:
                outgoing = await flow.__anext__()
                while True:
                    response = yield outgoing
                    if (asked_only and outgoing is request and response.status_code == 401
                            and extract_resource_metadata_from_www_auth(response) is None):  # fmt: skip
                        return
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()

    return Provider


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
