"""`wasmexec serve` over stdio, with a stdin reader that never holds up a shutdown.

The SDK's `stdio_server` reads stdin on an anyio worker thread. Cancelling that read
waits for it to return, which happens only when the client writes a line or closes
stdin, so a signal could not stop the server, and the thread kept the interpreter from
exiting. Here the event loop reads the client itself when it can wait on the descriptor
(a pipe, a socket or a terminal, on asyncio): a reader registered once (`LoopLines`), so a
message wakes the loop and nothing else, where a reader thread cost two more thread
wake-ups per message (the thread, then the loop it hands the line to, then the thread
again with the hand-off's result), each 0.1-0.3 ms on a busy 2-core machine. Otherwise
(a regular file, another backend) a daemon thread reads the lines and hands each to the
event loop. Either way cancelling stops waiting for lines at once, and the process exits
without waiting for a read. As the SDK does, fd 0 points at the null device while serving
(a tool server started meanwhile must not read the client's messages) and is restored
after; the duplicate read is never closed, since a reader thread may still be blocked on it.

The SDK writes each message with two worker-thread hops (``write``, then ``flush``, on an
anyio-wrapped file), which cost more than the rest of a trivial call's path on a busy
machine. When stdout is a pipe (as MCP clients start servers), the event loop writes it
itself, without ever blocking: in pieces of at most ``PIPE_BUF`` bytes, each only once the
pipe has room for it (a pipe that polls writable takes such a write whole, POSIX), waiting
on the loop otherwise. Meanwhile fd 1 points at stderr, as the SDK does, so stray output
(a tool server's, a library's print) misses the wire; it is restored after.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import select
import stat
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

if TYPE_CHECKING:
    from collections.abc import Iterator

    from wasmexec._server.server import RunPythonServer

#: Bytes taken from the client's pipe per read on the loop (a pipe holds 64 KiB by default).
READ_BYTES = 64 * 1024
#: Lines read ahead of the server before the loop stops reading: then the client's pipe fills and it waits.
MAX_PENDING_LINES = 64


async def serve_stdio(server: RunPythonServer) -> None:
    """Serves `server` on stdin and stdout until stdin closes or the caller cancels."""
    from mcp import stdio_server

    lowlevel = server.lowlevel()
    with _claimed_stdin() as fd, _client_lines(fd) as lines, _claimed_stdout() as stdout:
        stdin = cast(Any, lines)  # stdio_server only iterates it
        # Returns when stdin closes: the client is gone.
        async with stdio_server(stdin=stdin, stdout=cast(Any, stdout)) as (read, write):
            when_answered = server.when_answered
            if stdout is not None:  # a run's background work waits until its answer is written
                server.when_answered = stdout.after_next_flush
            try:
                await lowlevel.run(read, write, lowlevel.create_initialization_options())
            finally:
                server.when_answered = when_answered


@contextmanager
def _client_lines(fd: int) -> Iterator[AsyncIterator[str]]:
    """The client's lines from `fd`: read on the event loop when it can wait on `fd`, else by a thread."""
    lines = LoopLines.start(fd)
    if lines is not None:
        try:
            yield lines
        finally:
            lines.close()
        return
    send, receive = anyio.create_memory_object_stream[str](0)
    with receive:
        thread = threading.Thread(target=_read, args=(fd, send, anyio.lowlevel.current_token()),
                                  name="wasmexec-stdin", daemon=True)  # fmt: skip
        thread.start()
        yield _Lines(receive)


class LoopLines:
    """The client's lines, read by the event loop itself (asyncio) from a descriptor it can wait on.

    The loop's reader callback takes what the pipe holds (a read that never blocks: the loop saw data,
    and nothing else reads this descriptor), splits it into lines and wakes the task waiting for one.
    While `MAX_PENDING_LINES` lines wait unread the callback is removed, so a client that writes faster
    than the server reads is held up by its full pipe, as with a blocking reader.
    """

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        self._fd = fd
        self._loop = loop
        self._lines: deque[str] = deque()
        self._partial = bytearray()
        self._eof = False
        self._reading = False
        self._arrived: asyncio.Future[None] | None = None

    @classmethod
    def start(cls, fd: int) -> LoopLines | None:
        """Reading `fd` on the running loop; None when the loop cannot wait on it (not asyncio, a regular file)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another backend (trio): no loop of asyncio's to register a reader with
            return None
        lines = cls(fd, loop)
        try:
            lines._resume()
        except (OSError, ValueError):  # epoll refuses regular files and /dev/null (EPERM)
            return None
        return lines

    def close(self) -> None:
        """Stops reading (idempotent): the descriptor is left open and unread."""
        self._pause()
        self._eof = True

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._eof:
                if self._partial:  # the last line, without its newline (as `readline` returns it)
                    line, self._partial = self._partial.decode("utf-8", "replace"), bytearray()
                    return line
                raise StopAsyncIteration
            self._arrived = self._loop.create_future()
            try:
                await self._arrived
            finally:
                self._arrived = None
        line = self._lines.popleft()
        if not self._reading and not self._eof and len(self._lines) < MAX_PENDING_LINES // 2:
            self._resume()
        return line

    def _readable(self) -> None:
        """The loop's reader callback: never raises (an error ends the client's input, as end of file does)."""
        try:
            data = os.read(self._fd, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
        else:
            *complete, rest = (self._partial + data).split(b"\n")
            self._partial = bytearray(rest)
            self._lines.extend(line.decode("utf-8", "replace") + "\n" for line in complete)
            if len(self._lines) >= MAX_PENDING_LINES:
                self._pause()
        arrived = self._arrived
        if arrived is not None and not arrived.done():
            arrived.set_result(None)

    def _resume(self) -> None:
        self._loop.add_reader(self._fd, self._readable)
        self._reading = True

    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)


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
            text = line.decode("utf-8", "replace")
            try:  # the loop waits for the line (it mostly does): handed over by a callback, no task
                anyio.from_thread.run_sync(send.send_nowait, text, token=token)
            except anyio.WouldBlock:  # the loop is busy with earlier lines: wait until it takes this one
                anyio.from_thread.run(send.send, text, token=token)
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


class PipeWriter:
    """The client's pipe, written from the event loop without blocking it (`stdio_server` calls only these)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = bytearray()
        self._after: list[Callable[[], None]] = []

    def after_next_flush(self, then: Callable[[], None]) -> None:
        """Calls `then` once the next flush that starts from now has ended (written or failed): a call's answer,
        handed to the writer after this, is then out."""
        self._after.append(then)

    async def write(self, text: str) -> None:
        self._pending += text.encode("utf-8")

    async def flush(self) -> None:
        data, self._pending = memoryview(bytes(self._pending)), bytearray()
        after, self._after = self._after, []
        try:
            while data:
                if not select.select([], [self._fd], [], 0)[1]:  # full: the client reads slower than we write
                    await anyio.wait_writable(self._fd)
                data = data[os.write(self._fd, data[: select.PIPE_BUF]) :]
        finally:
            for then in after:
                then()


@contextmanager
def _claimed_stdout() -> Iterator[PipeWriter | None]:
    """A writer on a private duplicate of fd 1, with fd 1 on stderr meanwhile; None (the SDK's own
    threaded writer) when stdout is not a pipe or cannot be duplicated."""
    try:
        if not stat.S_ISFIFO(os.fstat(1).st_mode):
            yield None
            return
        private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield None
        return
    try:
        os.dup2(2, 1)
    except OSError:  # not diverted: write through fd 1 itself (nothing else may write it anyway)
        os.close(private)
        yield PipeWriter(1)
        return
    try:
        yield PipeWriter(private)
    finally:
        os.dup2(private, 1)
        os.close(private)
