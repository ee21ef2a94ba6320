"""Small assertions shared by tests."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wasmexec import validate_run_result


def data_of(result: Any) -> Any:
    """The run's data; fails the test with the whole result when the run did not succeed."""
    validate_run_result(result)
    assert result["result"]["ok"], result
    return result["result"]["data"]


def error_of(result: Any) -> dict[str, Any]:
    """The run's error; fails the test when the run succeeded."""
    validate_run_result(result)
    assert not result["result"]["ok"], result
    return dict(result["result"]["error"])


def log_text(result: dict[str, Any], level: str | None = None) -> str:
    """All log messages (of one level, if given) joined by newlines."""
    return "\n".join(entry["message"] for entry in result["logs"] if level is None or entry["level"] == level)


def diagnostic(result: Any, code: str) -> dict[str, Any]:
    """The first diagnostic with `code`; fails when there is none."""
    found = [d for d in result["diagnostics"] if d["code"] == code]
    assert found, f"no {code} diagnostic in {result['diagnostics']}"
    return dict(found[0])


def limit_of(result: Any) -> str:
    """Which limit stopped the run (from its SANDBOX_LIMIT diagnostic)."""
    assert error_of(result)["type"] == "SandboxLimitError", result
    return str(diagnostic(result, "SANDBOX_LIMIT")["limit"])


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def listening(command: list[str], port: int, env: dict[str, str] | None = None, timeout: float = 60) -> Iterator[str]:
    """Starts an HTTP MCP server process, waits until its port accepts, yields its /mcp URL, stops it."""
    import os
    import socket
    import subprocess
    import time

    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise AssertionError(f"{command} did not listen on port {port}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=20)


@contextmanager
def python_allocations() -> Iterator[Callable[[], int]]:
    """Traces the host's Python allocations inside the block; yields a function giving their peak (bytes).

    Before tracing stops it waits 50 ms: `tracemalloc.stop()` while a thread Python did not start
    is taking the GIL crashes CPython before 3.13 (python/cpython#128679), and wasmtime's own threads
    call the WASI output callbacks, some just after a run has returned. Stopping at once segfaulted
    about one process in two over 200 traced output floods; after the pause, none in 800.
    """
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        time.sleep(0.05)
        tracemalloc.stop()


def descendants(pid: int) -> set[int]:
    """The pids of every process under `pid` (children, their children, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def wait_until(ready: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Polls `ready` until it holds; fails the test naming `what` after `timeout` seconds."""
    import pytest

    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def start_serve_http(options: Sequence[str], env: dict[str, str], stderr: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Starts ``python -m wasmexec serve --http`` on a free loopback port with `options`, its stderr written to
    `stderr`; returns the process and the port without waiting (`wait_for_health` does)."""
    port = free_port()
    command = [sys.executable, "-m", "wasmexec", "serve", "--http", "--port", str(port), *options]
    with stderr.open("ab") as errors:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
    return process, port


def wait_for_health(port: int, process: subprocess.Popen[bytes], stderr: Path, timeout: float = 60.0) -> None:
    """Until the server's /healthz answers 200 (the server is made; its port accepts connections earlier);
    fails with its stderr when it exits first or `timeout` passes."""
    import urllib.request

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return process.poll() is not None

    wait_until(healthy, f"the server on port {port} to answer /healthz", timeout)
    assert process.poll() is None, f"the server exited: {stderr.read_text()}"


def serve_options() -> set[str]:
    """Every option `wasmexec serve` has (from the real parser)."""
    import argparse

    from wasmexec._cli.main import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {option for action in commands.choices["serve"]._actions for option in action.option_strings}


def haproxy() -> str:
    """The path of Debian's haproxy. Without it the test skips, saying how to install it, except in CI
    (`CI` set, as `.ci/run` is run), where it fails: a skip there would hide a missing install step."""
    import os
    import shutil

    import pytest

    found = shutil.which("haproxy")
    if found is None:
        why = "haproxy is not installed: apt-get install -y haproxy (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return found
