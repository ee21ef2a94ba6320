"""Operating `wasmexec serve`: streamed output, /healthz and /metrics, a bounded queue, allowed hosts.

Real `wasmexec serve` processes (stdio and HTTP), a real `mcp` client and raw HTTP requests.
A run that prints "started" and then sleeps stands for a long run: its streamed "started"
is the signal that it is in flight, so nothing here waits by the clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import LoggingMessageNotificationParams

from tests.helpers import data_of, free_port, listening
from tests.integration.conftest import child_env
from wasmexec import Runtime, validate_run_result

#: A key in a known format: redacted from streamed text as from the result.
LEAKED = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
#: Prints, then sleeps long enough for the test to look at the server while the run is in flight.
LONG_RUN = f"print('started')\nprint({LEAKED!r})\nimport time\ntime.sleep(4)\nprint('finished')\nresult = 'slept'"


@pytest.fixture(scope="module")
def cache(runtime: Runtime) -> Path:
    return Path(runtime.artifacts.directory)


def _serve(cache: Path, *options: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--no-audit", "--timeout-ms", "30000", *options],
        env=child_env(WASMEXEC_CACHE_DIR=str(cache)),
    )


class Watcher:
    """Collects streamed messages and signals when one contains a word."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.started = anyio.Event()
        self.done = False
        self.before_done: list[str] = []

    def saw(self, text: str) -> None:
        self.messages.append(text)
        if not self.done:
            self.before_done.append(text)
        if "started" in text:
            self.started.set()

    async def on_log(self, params: LoggingMessageNotificationParams) -> None:
        self.saw(f"{params.level}:{params.logger}:{params.data}")

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.saw(message or "")


async def _long_run(client: Client, watcher: Watcher, while_running: Callable[[], Awaitable[Any]]) -> Any:
    """Starts LONG_RUN, awaits `while_running()` once its "started" arrived, then returns the run result."""
    outcome: dict[str, Any] = {}

    async def call() -> None:
        result = await client.call_tool("run_python", {"code": LONG_RUN}, progress_callback=watcher.on_progress)
        watcher.done = True
        outcome["result"] = result.structured_content

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await watcher.started.wait()
        assert not watcher.done
        outcome["during"] = await while_running()
    return outcome


def _run(params: Any, mode: str, body: Callable[[Client], Awaitable[Any]], **options: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120), warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # protocol logging is deprecated in 2026
            async with Client(params, mode=mode, **options) as client:
                return await body(client)

    return anyio.run(main)


async def _nothing() -> None:
    return None


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_printed_output_arrives_as_log_notifications_before_the_run_ends(cache: Path, mode: str) -> None:
    watcher = Watcher()

    async def body(client: Client) -> Any:
        if mode == "legacy":  # 2025 era: logging/setLevel; 2026 era: the log level in each request's _meta
            await client.set_logging_level("info")
        return await _long_run(client, watcher, _nothing)

    outcome = _run(_serve(cache), mode, body, logging_callback=watcher.on_log, log_level="info")
    assert data_of(outcome["result"]) == "slept"
    assert any(m.startswith("info:stdout:") and "started" in m for m in watcher.before_done)
    streamed = "\n".join(watcher.messages)
    assert "finished" in streamed  # the last lines are sent before the result
    assert LEAKED not in streamed and "[REDACTED]" in streamed


def test_without_a_log_level_printed_output_arrives_as_progress_messages(cache: Path) -> None:
    watcher = Watcher()
    outcome = _run(_serve(cache), "auto", lambda client: _long_run(client, watcher, _nothing))
    assert data_of(outcome["result"]) == "slept"
    assert any("started" in m for m in watcher.before_done)
    assert LEAKED not in "\n".join(watcher.messages)


def test_a_full_stdio_server_answers_a_retryable_error_and_runs_nothing(cache: Path) -> None:
    watcher = Watcher()

    async def body(client: Client) -> Any:
        async def second() -> Any:
            return await client.call_tool("run_python", {"code": "result = 'ran'"})

        return await _long_run(client, watcher, second)

    params = _serve(cache, "--max-concurrent-runs", "1", "--max-queued-runs", "0")
    outcome = _run(params, "auto", body)
    refused = outcome["during"]
    assert refused.is_error
    validate_run_result(refused.structured_content)
    error = refused.structured_content["result"]["error"]
    assert error["type"] == "ServerBusy" and error["retryable"] is True
    assert data_of(outcome["result"]) == "slept"


@pytest.fixture(scope="module")
def busy_url(cache: Path) -> Iterator[str]:
    """An HTTP server that runs one run at a time and queues none."""
    params, port = _serve(cache, "--max-concurrent-runs", "1", "--max-queued-runs", "0"), free_port()
    with listening([params.command, *params.args, "--http", "--port", str(port)], port, params.env) as url:
        yield url


def _base(url: str) -> str:
    return url.removesuffix("/mcp")


def _sample(metrics: str, name: str) -> float:
    """The value of one sample line (`name` with its labels) in a Prometheus exposition."""
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {name} in:\n{metrics}")


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}  # fmt: skip
RUN_CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "run_python", "arguments": {"code": "result = 1"}}}  # fmt: skip
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_healthz_and_metrics_are_scraped_during_a_run_and_a_full_queue_answers_503(busy_url: str) -> None:
    watcher = Watcher()
    base = _base(busy_url)

    async def scrape() -> dict[str, Any]:
        async with httpx2.AsyncClient(timeout=30) as http:
            health = await http.get(base + "/healthz")
            metrics = await http.get(base + "/metrics")
            refused = await http.post(busy_url, json=RUN_CALL, headers=MCP_HEADERS)
            listing = await http.post(busy_url, json=INITIALIZE, headers=MCP_HEADERS)
        return {"health": health, "metrics": metrics, "refused": refused, "listing": listing}

    outcome = _run(busy_url, "auto", lambda client: _long_run(client, watcher, scrape))
    during = outcome["during"]
    assert during["health"].status_code == 200
    health = during["health"].json()
    assert health["status"] == "busy" and health["runs"]["in_flight"] == 1 and health["runs"]["queued"] == 0
    assert health["version"]
    assert during["metrics"].status_code == 200
    assert during["metrics"].headers["content-type"].startswith("text/plain")
    assert _sample(during["metrics"].text, "wasmexec_runs_in_flight") == 1
    refused = during["refused"]
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["data"]["retryable"] is True and refused.json()["id"] == 7
    assert during["listing"].status_code == 200  # only new runs are refused
    assert data_of(outcome["result"]) == "slept"

    after = httpx2.get(base + "/metrics", timeout=30).text
    assert _sample(after, 'wasmexec_runs_total{outcome="ok"}') >= 1
    assert _sample(after, "wasmexec_run_duration_seconds_count") >= 1
    assert _sample(after, "wasmexec_runs_in_flight") == 0
    assert "# TYPE wasmexec_sampling_calls_total counter" in after  # defined before anything counts it


def test_a_foreign_host_is_refused_by_default_but_health_answers_any_host(busy_url: str) -> None:
    base = _base(busy_url)
    refused = httpx2.post(busy_url, json=INITIALIZE, headers={**MCP_HEADERS, "host": "mcp.example.com"}, timeout=30)
    assert refused.status_code == 421
    assert httpx2.get(base + "/healthz", headers={"host": "mcp.example.com"}, timeout=30).status_code == 200


def test_allowed_hosts_and_origins_are_served_and_others_still_refused(cache: Path) -> None:
    params, port = _serve(cache, "--allowed-host", "mcp.example.com",
                          "--allowed-origin", "https://app.example.com"), free_port()  # fmt: skip
    with listening([params.command, *params.args, "--http", "--port", str(port)], port, params.env) as url:

        def post(**headers: str) -> int:
            return httpx2.post(url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=30).status_code

        assert post(host="mcp.example.com") == 200
        assert post(host="mcp.example.com:443", origin="https://app.example.com") == 200
        assert post(host="evil.example.com") == 421
        assert post(host="mcp.example.com", origin="https://evil.example.com") == 403
        assert post() == 200  # loopback still works


def test_run_stream_prints_output_to_stderr_before_the_run_ends(cache: Path) -> None:
    command = [sys.executable, "-m", "wasmexec", "run", "--stream", "--no-audit", "-c", LONG_RUN]
    env = child_env(WASMEXEC_CACHE_DIR=str(cache))
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as process:
        assert process.stderr is not None and process.stdout is not None
        first = process.stderr.readline()
        assert first == b"started\n" and process.poll() is None  # printed while the run goes on
        rest, stdout = process.stderr.read(), process.stdout.read()  # the result line fits in the pipe's buffer
        assert process.wait(timeout=60) == 0
    lines = stdout.decode().splitlines()
    assert len(lines) == 1  # stdout: the one result line, as without --stream
    assert data_of(json.loads(lines[0])) == "slept"
    assert rest.decode() == "[REDACTED]\nfinished\n"


@pytest.mark.parametrize(
    ("option", "value"),
    [("--allowed-host", "https://mcp.example.com"), ("--allowed-host", "mcp.example.com/mcp"),
     ("--allowed-origin", "https://app.example.com/page"), ("--allowed-origin", "app.example.com")],
)  # fmt: skip
def test_a_url_where_a_host_or_origin_belongs_is_a_usage_error(option: str, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "wasmexec", "serve", "--http", option, value],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and option in done.stderr and "Traceback" not in done.stderr


def test_allowed_hosts_need_http() -> None:
    done = subprocess.run([sys.executable, "-m", "wasmexec", "serve", "--allowed-host", "mcp.example.com"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 2 and "--http" in done.stderr
