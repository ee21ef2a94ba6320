"""The client transports to MCP servers, with every message from a server bounded in size.

The SDK reads a stdio server's line, however long, into memory and parses it whole,
and reads an HTTP JSON reply whole too: a 12.5 MB reply of small JSON objects cost the
host 906 MB before anything checked its size. Here no message larger than
`MAX_MESSAGE_BYTES` is held or parsed:

- stdio (`stdio_transport`): the SDK's `stdio_client` with our own reader, which splits
  the server's stdout into lines as bytes and drops a line as soon as it grows past the
  cap, keeping only its first and last bytes. If they show the JSON-RPC id (the SDKs put
  it first or last), that one request fails with a "reply too large" error and the
  connection goes on; otherwise the connection is dropped (a server sending unanswerable
  oversized messages is broken).
- streamable HTTP (`http_transport`): a JSON reply's body is counted as it arrives and
  reading stops past the cap, failing only that request; server-sent events are capped
  per event by the SDK (`max_sse_event_size`), here at the same size. Replies are
  requested uncompressed, and a compressed one is decompressed under the same cap.
- the legacy HTTP+SSE transport (`sse_transport`): the same caps on replies, and each event
  of the stream capped here (`bound_events`); an oversized event ends the connection.

`wasmexec._tools.mcp_errors` turns the resulting errors into ``limit-exceeded`` errors.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.lowlevel
import httpx2

from wasmexec._runctx.toolhost import MAX_PAYLOAD_BYTES
from wasmexec._tools.config import ServerConfig
from wasmexec._tools.mcp_errors import REPLY_TOO_LARGE

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams
    from mcp.shared.message import SessionMessage

logger = logging.getLogger(__name__)

#: A reply larger than the largest payload a host call may return cannot be used anyway
#: (a structured result also carries its text rendering, so it counts about twice).
MAX_MESSAGE_BYTES = MAX_PAYLOAD_BYTES
#: Bytes kept from each end of an oversized line: enough to find its JSON-RPC id.
_EDGE_BYTES = 256
#: Connect, write and pool timeouts of HTTP servers; reads wait on the run's deadline instead.
HTTP_TIMEOUT_S = 30.0

_ID = rb'(-?\d{1,20}|"(?:[^"\\]|\\.){0,200}")'
# A response is {"jsonrpc", "id", "result"|"error"} (Python SDK order) or {"result"|"error", "jsonrpc", "id"}
# (TypeScript SDK order); a request or notification has "method" instead and is never answered for.
_RESPONSE_ID_FIRST = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID
                                + rb'\s*,\s*"(?:result|error)"\s*:')  # fmt: skip
_RESPONSE_ID_LAST_HEAD = re.compile(rb'\A\s*\{\s*"(?:result|error)"\s*:')
_RESPONSE_ID_LAST = re.compile(rb'"id"\s*:\s*' + _ID + rb"\s*\}\s*\Z")
_METHOD = re.compile(rb'\A\s*\{[^{}\[\]]{0,200}"method"\s*:')


def too_large_message(size: int) -> str:
    """The error text of a dropped reply (`mcp_errors` recognises it)."""
    return f"{REPLY_TOO_LARGE}: over {size} bytes; the limit is {MAX_MESSAGE_BYTES}"


class _Oversized:
    """What is kept of a line too long to hold: its first and last bytes and its length."""

    def __init__(self, start: bytes) -> None:
        self.head = start[:_EDGE_BYTES]
        self.tail = start[-_EDGE_BYTES:]
        self.size = len(start)

    def add(self, piece: bytes) -> None:
        if len(self.head) < _EDGE_BYTES:
            self.head += piece[: _EDGE_BYTES - len(self.head)]
        self.tail = (self.tail + piece)[-_EDGE_BYTES:]
        self.size += len(piece)

    def request_id(self) -> int | str | None:
        """The JSON-RPC id of the response this was, if its first or last bytes show it."""
        found = _RESPONSE_ID_FIRST.match(self.head)
        if found is None and _RESPONSE_ID_LAST_HEAD.match(self.head):
            found = _RESPONSE_ID_LAST.search(self.tail)
        if found is None:
            return None
        value = json.loads(found.group(1))
        return value if isinstance(value, (int, str)) else None

    def is_request(self) -> bool:
        """Whether this was a request or notification from the server (nothing waits for it here)."""
        return _METHOD.match(self.head) is not None


class LineSplitter:
    """Splits a byte stream into lines of at most `limit` bytes; longer ones come out as `_Oversized`."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._oversized: _Oversized | None = None

    def feed(self, chunk: bytes) -> list[bytes | _Oversized]:
        """The lines that `chunk` completes, without their newlines."""
        lines: list[bytes | _Oversized] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            self._add(chunk[start:] if end < 0 else chunk[start:end])
            if end < 0:
                return lines
            lines.append(self._take())
            start = end + 1

    def _add(self, piece: bytes) -> None:
        if self._oversized is not None:
            self._oversized.add(piece)
        elif len(self._buffer) + len(piece) > self.limit:
            self._oversized = _Oversized(bytes(self._buffer) + piece)
            self._buffer = bytearray()
        else:
            self._buffer += piece

    def _take(self) -> bytes | _Oversized:
        if self._oversized is not None:
            line, self._oversized = self._oversized, None
            return line
        taken, self._buffer = bytes(self._buffer), bytearray()
        return taken


def _message(line: bytes | _Oversized, encoding: str, errors: str) -> SessionMessage | Exception | None:
    """A parsed line, the error reply standing in for a dropped one, or None for a blank line."""
    from mcp.client.stdio import _parse_line
    from mcp.shared.message import SessionMessage
    from mcp.types import INTERNAL_ERROR, ErrorData, JSONRPCError

    if isinstance(line, _Oversized):
        request_id = line.request_id()
        if request_id is None and line.is_request():
            logger.warning("Dropped a %d-byte message from an MCP server: over the size cap", line.size)
            return None
        if request_id is None:
            return _UnanswerableReply(too_large_message(line.size))
        error = ErrorData(code=INTERNAL_ERROR, message=too_large_message(line.size))
        return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
    if not line.strip():
        return None
    return _parse_line(line.decode(encoding, errors))


class _UnanswerableReply(Exception):
    """An oversized message without a recognisable id: no request can be failed in its place."""


@asynccontextmanager
async def stdio_transport(config: ServerConfig, errlog: TextIO | None = None) -> AsyncIterator[TransportStreams]:
    """The SDK's stdio transport, reading the server's stdout with a bounded line reader.

    The process handling (environment, process group, the shutdown sequence) is the SDK's
    own, from `mcp.client.stdio`; only the reader differs.
    """
    from mcp.client import stdio as sdk
    from mcp.shared.message import SessionMessage

    assert config.command is not None
    # "replace": one undecodable byte from a server would otherwise kill the reader and hang every call.
    params = sdk.StdioServerParameters(command=config.command, args=list(config.args), env=config.env or None,
                                       cwd=config.cwd, encoding_error_handler="replace")  # fmt: skip
    command = await sdk._get_executable_command(params.command)
    process = await sdk._create_platform_compatible_process(
        command=command, args=params.args, env=sdk.get_default_environment() | (params.env or {}),
        errlog=errlog or sys.stderr, cwd=params.cwd,
    )  # fmt: skip
    # No awaits until the task group is entered, or a cancellation in the gap would leak the process.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        assert process.stdout is not None
        lines = LineSplitter()
        try:
            async with read_writer:
                try:
                    async for chunk in process.stdout:
                        for line in lines.feed(chunk):
                            message = _message(line, params.encoding, params.encoding_error_handler)
                            if message is None:
                                continue
                            try:
                                await read_writer.send(message)
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                            if isinstance(message, _UnanswerableReply):
                                return  # closing the read stream fails every pending request
                finally:
                    await sdk._drain_stdout(process)
        except anyio.ClosedResourceError:
            pass
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                logger.exception("Reading from the MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((text + "\n").encode(params.encoding, params.encoding_error_handler))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the connection end instead of a hung request
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await sdk._stop_server_process(process)
        await sdk._aclose_all(read_stream, write_stream, read_writer, write_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # the server process must not leak, even when cancelled
                await shutdown()
            group.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


@asynccontextmanager
async def http_transport(
    config: ServerConfig, *, on_secret: Callable[[str], None] | None = None, sign_in_timeout: float | None = None
) -> AsyncIterator[TransportStreams]:
    """Streamable HTTP with the configured headers and bounded replies; the HTTP client closes with it.

    OAuth (`wasmexec._tools.oauth`): the client authenticates with the server's stored token, and
    signs in when the server answers 401; `on_secret` gets every token, `sign_in_timeout` bounds the wait.
    """
    from mcp.client.streamable_http import streamable_http_client

    from wasmexec._tools import oauth

    assert config.url is not None
    headers = {"Accept-Encoding": "identity", **config.headers}
    auth = oauth.provider(config, on_secret=on_secret, timeout=sign_in_timeout or oauth.LOGIN_TIMEOUT_S)
    async with (
        httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=None),
            event_hooks={"response": [bound_reply]},
            auth=auth,
        ) as http,  # fmt: skip
        streamable_http_client(config.url, http_client=http, max_sse_event_size=MAX_MESSAGE_BYTES) as streams,
    ):
        yield streams


@asynccontextmanager
async def sse_transport(
    config: ServerConfig, *, on_secret: Callable[[str], None] | None = None, sign_in_timeout: float | None = None
) -> AsyncIterator[TransportStreams]:
    """The legacy HTTP+SSE transport (``"type": "sse"``), through the SDK's `sse_client`, every event bounded.

    Headers, OAuth and the reply caps are those of `http_transport`; events of the stream are cut
    off past `MAX_MESSAGE_BYTES` (`bound_events`), which ends the connection (the SDK's SSE
    client has no cap of its own, and an oversized event cannot be matched to a request).
    """
    from mcp.client.sse import sse_client

    from wasmexec._tools import oauth

    assert config.url is not None
    auth = oauth.provider(config, on_secret=on_secret, timeout=sign_in_timeout or oauth.LOGIN_TIMEOUT_S)

    def client(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
    ) -> httpx2.AsyncClient:
        # Reads wait on the run's deadline, as over streamable HTTP: an idle event stream is not a failure.
        return httpx2.AsyncClient(headers={"Accept-Encoding": "identity", **(headers or {})}, auth=auth,
                                  timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=None),
                                  event_hooks={"response": [bound_reply, bound_events]})  # fmt: skip

    async with sse_client(config.url, headers=config.headers, httpx_client_factory=client, auth=auth) as streams:
        yield streams


async def bound_events(response: httpx2.Response) -> None:
    """An httpx2 response hook: an event stream fails once one event passes `MAX_MESSAGE_BYTES`."""
    if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
        return
    if response.headers.get("content-encoding", "identity").lower() != "identity":
        raise httpx2.StreamError("the server sent a compressed event stream, which wasmexec does not accept")
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    response.stream = _CappedEvents(response.stream)


class _CappedEvents(httpx2.AsyncByteStream):
    """An event stream whose events (text up to a blank line) may not pass `MAX_MESSAGE_BYTES`."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = 0  # bytes of the event being received
        tail = b""  # the last bytes seen, to find a blank line split across chunks
        async for chunk in self._inner:
            seen = tail + chunk
            end = max(seen.rfind(b"\n\n"), seen.rfind(b"\r\n\r\n"), seen.rfind(b"\r\r"))
            pending = len(seen) - end if end >= 0 else pending + len(chunk)
            if pending > MAX_MESSAGE_BYTES:
                raise httpx2.StreamError(too_large_message(MAX_MESSAGE_BYTES))
            tail = seen[-3:]
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def bound_reply(response: httpx2.Response) -> None:
    """An httpx2 response hook: a non-SSE body fails past `MAX_MESSAGE_BYTES`, decoded.

    Hooks run before the body is read, for every transport of the client (proxies included).
    A bare 401/403 becomes a JSON-RPC error that names it, instead of the SDK's anonymous
    "Server returned an error response".
    """
    content_type = response.headers.get("content-type", "").lower()
    if response.status_code in (401, 403):
        await _explain_refusal(response, content_type.startswith("application/json"))
        return
    if content_type.startswith("text/event-stream"):
        return  # capped per event by the SDK, after decoding
    assert isinstance(response.stream, httpx2.AsyncByteStream)  # an async client's response
    response.stream = _CappedBody(response.stream, response.headers.get("content-encoding", "identity").lower())
    response.headers.pop("content-encoding", None)  # decoded by _CappedBody, under the cap


async def _explain_refusal(response: httpx2.Response, is_json: bool) -> None:
    """A 401/403 body that is not a JSON-RPC error becomes one that says so (the OAuth flow reads only headers)."""
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    body = b""
    if is_json:
        capped = _CappedBody(response.stream, response.headers.get("content-encoding", "identity").lower())
        try:
            body = b"".join([chunk async for chunk in capped])
        except httpx2.StreamError:
            body = b""
    await response.stream.aclose()
    try:
        if is_json and "jsonrpc" in json.loads(body):
            _replace_body(response, body)  # the server's own JSON-RPC error, already read
            return
    except (ValueError, TypeError):
        pass
    _replace_body(response, _credentials_rejected(response.status_code, response.headers.get("www-authenticate", "")))


def _credentials_rejected(status: int, challenge: str) -> bytes:
    from mcp.types import INTERNAL_ERROR

    reason = "401 Unauthorized" if status == 401 else "403 Forbidden"
    detail = re.search(r'error_description="([^"]{0,200})"', challenge) or re.search(r'error="([^"]{0,60})"', challenge)
    said = f" ({detail.group(1)})" if detail else ""
    hint = " If it uses OAuth, sign in with `wasmexec config login SERVER`." if status == 401 else ""
    error = {"code": INTERNAL_ERROR, "message": f"HTTP {reason}: the server rejected the credentials{said}.{hint}"}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


def _replace_body(response: httpx2.Response, body: bytes) -> None:
    response.stream = httpx2.ByteStream(body)
    response.headers.pop("content-encoding", None)
    response.headers["content-type"] = "application/json"
    response.headers["content-length"] = str(len(body))


class _CappedBody(httpx2.AsyncByteStream):
    """A response body that decodes gzip/deflate itself and stops past `MAX_MESSAGE_BYTES`."""

    def __init__(self, inner: httpx2.AsyncByteStream, encoding: str) -> None:
        self._inner = inner
        self._encoding = encoding

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder = _decoder(self._encoding)
        size = 0
        async for raw in self._inner:
            chunk = raw if decoder is None else decoder.decompress(raw, MAX_MESSAGE_BYTES + 1 - size)
            size += len(chunk)
            if size > MAX_MESSAGE_BYTES or (decoder is not None and decoder.unconsumed_tail):
                raise httpx2.StreamError(too_large_message(MAX_MESSAGE_BYTES))
            yield chunk
        rest = b"" if decoder is None else decoder.flush()
        if size + len(rest) > MAX_MESSAGE_BYTES:
            raise httpx2.StreamError(too_large_message(MAX_MESSAGE_BYTES))
        if rest:
            yield rest

    async def aclose(self) -> None:
        await self._inner.aclose()


def _decoder(encoding: str) -> Any:
    if encoding in ("identity", ""):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, told apart by the header
    raise httpx2.StreamError(f"the server sent a reply in an unsupported encoding {encoding!r}")
