"""`wasmexec serve` over stdio, with a stdin reader that never holds up a shutdown.

The SDK's `stdio_server` reads stdin on an anyio worker thread. Cancelling that read
waits for it to return, which happens only when the client writes a line or closes
stdin, so a signal could not stop the server, and the thread kept the interpreter from
exiting. Here a daemon thread reads the lines and hands each to the event loop:
cancelling stops waiting for them at once, and the process exits without waiting for
the read. As the SDK does, fd 0 points at the null device while serving (a tool server
started meanwhile must not read the client's messages) and is restored after; the
duplicate the thread reads is never closed, since the thread may still be blocked on it.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import AsyncIterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

if TYPE_CHECKING:
    from collections.abc import Iterator

    from wasmexec._server.server import RunPythonServer


async def serve_stdio(server: RunPythonServer) -> None:
    """Serves `server` on stdin and stdout until stdin closes or the caller cancels."""
    from mcp import stdio_server

    lowlevel = server.lowlevel()
    send, receive = anyio.create_memory_object_stream[str](0)
    with _claimed_stdin() as fd, receive:
        thread = threading.Thread(target=_read, args=(fd, send, anyio.lowlevel.current_token()),
                                  name="wasmexec-stdin", daemon=True)  # fmt: skip
        thread.start()
        stdin = cast(Any, _Lines(receive))  # stdio_server only iterates it
        async with stdio_server(stdin=stdin) as (read, write):  # returns when stdin closes: the client is gone
            await lowlevel.run(read, write, lowlevel.create_initialization_options())


class _Lines:
    """The lines the reader thread hands over, as `stdio_server` iterates a file."""

    def __init__(self, receive: MemoryObjectReceiveStream[str]) -> None:
        self._receive = receive

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


def _read(fd: int, send: MemoryObjectSendStream[str], token: anyio.lowlevel.EventLoopToken) -> None:
    """The reader thread: each line to the loop until end of file, or until nobody listens any more."""
    stream = os.fdopen(fd, "rb", closefd=False)
    try:
        while line := stream.readline():
            anyio.from_thread.run(send.send, line.decode("utf-8", "replace"), token=token)
        anyio.from_thread.run_sync(send.close, token=token)
    except Exception:  # the server stopped listening (stream closed, loop gone): the thread just ends
        pass


@contextmanager
def _claimed_stdin() -> Iterator[int]:
    """A private duplicate of fd 0 to read the client from, with fd 0 on the null device meanwhile."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:  # no duplicate possible: read fd 0 itself
        yield 0
        return
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield private
    finally:
        os.dup2(private, 0)
