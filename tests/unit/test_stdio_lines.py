"""The client's lines over stdio are read by the event loop itself (`wasmexec._server.stdio.LoopLines`): no
thread wakes per message, lines split anywhere arrive whole, a client that writes faster than the server reads
waits on its full pipe, and a descriptor the loop cannot wait on falls back to the reader thread."""

from __future__ import annotations

import fcntl
import os
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import anyio.from_thread
import pytest

from wasmexec._server import stdio
from wasmexec._server.stdio import MAX_PENDING_LINES, READ_BYTES, LoopLines


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        try:
            os.close(fd)
        except OSError:
            pass


def _pending(fd: int) -> int:
    buffer = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return int.from_bytes(buffer, sys.byteorder)


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Polls `condition` with a deadline, letting the loop run its reader in between."""
    try:
        with anyio.fail_after(30):
            while not condition():
                await anyio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def test_lines_split_anywhere_arrive_whole_and_no_thread_wakes_for_them(
    pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    read_end, write_end = pipe
    started, hops = [], []
    start, run_sync = threading.Thread.start, anyio.from_thread.run_sync
    monkeypatch.setattr(threading.Thread, "start", lambda thread: (started.append(thread.name), start(thread)))
    monkeypatch.setattr(anyio.from_thread, "run_sync", lambda *a, **k: (hops.append(a), run_sync(*a, **k))[1])
    pieces = [b'{"id": 1}\n{"id"', b': 2, "text": "\xc3', b'\xa9"}\n', b"\n", b'{"id": 3}']  # a UTF-8 char split too

    async def main() -> list[str]:
        lines = LoopLines.start(read_end)
        assert lines is not None
        received = []
        try:
            for piece in pieces:
                os.write(write_end, piece)
                await _until(lambda: _pending(read_end) == 0, "the loop to read the piece")
            os.close(write_end)
            async for line in lines:
                received.append(line)
        finally:
            lines.close()
        return received

    assert anyio.run(main) == ['{"id": 1}\n', '{"id": 2, "text": "é"}\n', "\n", '{"id": 3}']  # the last: no newline
    assert started == [] and hops == []


def test_a_client_that_writes_faster_than_the_server_reads_waits_on_its_full_pipe(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    line = b"x" * 1023 + b"\n"
    count = 4 * MAX_PENDING_LINES + READ_BYTES // len(line)  # several pipes full

    def client() -> None:
        for _ in range(count):
            os.write(write_end, line)
        os.close(write_end)

    async def main() -> int:
        lines = LoopLines.start(read_end)
        assert lines is not None
        writer = threading.Thread(target=client)
        writer.start()
        try:
            # Nobody takes lines: the loop stops reading once enough wait, and the client's pipe fills.
            await _until(lambda: _pending(read_end) >= 60 * 1024, "the client's pipe to fill")
            assert writer.is_alive()
            received = 0
            async for got in lines:
                assert got == line.decode()
                received += 1
        finally:
            lines.close()
            writer.join(30)
        return received

    assert anyio.run(main) == count


def test_a_regular_file_is_read_by_the_reader_thread_instead(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": 1}\n')

    async def main() -> list[str]:
        with open(requests, "rb") as file, stdio._client_lines(file.fileno()) as lines:
            assert not isinstance(lines, LoopLines)  # epoll cannot wait on a regular file
            return [line async for line in lines]

    assert anyio.run(main) == ['{"id": 1}\n']
