"""`wasmexec serve` writes its messages to the client's pipe from the event loop (`wasmexec._server.stdio`):
a message larger than the pipe arrives whole, and a client that does not read holds up nothing else."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from tests.integration.conftest import child_env
from wasmexec import Runtime

#: Linux's default pipe capacity: a client that reads nothing leaves this much in the pipe.
PIPE_CAPACITY = 64 * 1024


def _pending(fd: int) -> int:
    buffer = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return int.from_bytes(buffer, sys.byteorder)


def _until(condition: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_message_larger_than_the_pipe_arrives_whole_while_the_server_goes_on(
    runtime: Runtime, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "wasmexec", "serve", "--audit-log", str(audit), "--max-sessions", "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**os.environ, **child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory))},
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    stdout = process.stdout.fileno()

    def send(message: dict[str, Any]) -> None:
        process.stdin.write((json.dumps(message) + "\n").encode())  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]

    try:
        client = {"name": "t", "version": "1"}
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}})  # fmt: skip
        assert json.loads(process.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        # About 1.2 MB of UTF-8 (two bytes a character, so pieces of the write split characters).
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_python", "arguments": {
            "code": "result = 'é' * 300_000"}}})  # fmt: skip
        _until(lambda: _pending(stdout) >= PIPE_CAPACITY, "the server to fill the pipe")
        # The pipe is full and the client reads nothing: the server still takes and runs the next call.
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "run_python", "arguments": {
            "code": "result = 3"}}})  # fmt: skip
        _until(lambda: audit.exists() and len(audit.read_text().splitlines()) == 2, "the second run's audit line")
        replies = {reply["id"]: reply for reply in (json.loads(process.stdout.readline()) for _ in range(2))}
    finally:
        process.stdin.close()
        process.wait(timeout=30)
        process.stdout.close()
    assert replies[2]["result"]["structuredContent"]["result"]["data"] == "é" * 300_000
    assert replies[3]["result"]["structuredContent"]["result"]["data"] == 3


def test_what_waits_for_an_answer_runs_once_the_flush_that_writes_it_has_ended() -> None:
    import anyio

    from wasmexec._server.stdio import PipeWriter

    read_end, write_end = os.pipe()
    writer, events = PipeWriter(write_end), []

    async def main() -> None:
        writer.after_next_flush(lambda: events.append(os.read(read_end, 100)))
        await writer.write("answer\n")
        assert events == []  # written to the buffer only: not out yet
        await writer.flush()
        assert events == [b"answer\n"]  # ran after the bytes were in the pipe
        writer.after_next_flush(lambda: events.append(b"failed"))
        os.close(read_end)
        await writer.write("lost\n")
        try:
            await writer.flush()  # the client is gone: the write fails, what waited runs anyway
        except BrokenPipeError:
            pass
        assert events[-1] == b"failed"

    try:
        anyio.run(main)
    finally:
        os.close(write_end)
