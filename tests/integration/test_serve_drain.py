"""SIGTERM drains `wasmexec serve --http`: no new runs, in-flight runs finish and answer, then a clean exit.

A real `wasmexec serve --http` subprocess with its own TMPDIR and XDG_STATE_HOME, real `mcp` clients in
both protocol eras, raw HTTP for what a proxy sees. A run writes a marker in its /tmp (the test sees the
run directory in TMPDIR) and then sleeps: the test signals the server while the run is in flight, looks
at the server during the drain (health, a new call), and then checks that the run's client got its
whole result, the process exited 0, every audit line names the replica and nothing is left in TMPDIR.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.types import ElicitResult

from tests.helpers import start_serve_http, wait_for_health, wait_until
from tests.integration.conftest import SERVERS, child_env
from wasmexec import Runtime
from wasmexec._server.shutdown import STOP_GRACE_S

#: Long enough that the test looks at the draining server (health, a refused call) before it ends,
#: on a loaded two-core machine; the run holds no CPU while it sleeps.
RUN_S = 8
#: A run that lasts RUN_S; the marker tells the test it is in flight.
LONG_RUN = f"open('/tmp/started', 'w').write('x')\nimport time\ntime.sleep({RUN_S})\nresult = 'finished'"
#: A run that never ends by itself within the test (stopped by the drain timeout).
ENDLESS_RUN = "open('/tmp/started', 'w').write('x')\nimport time\ntime.sleep(600)\nresult = 'never'"
#: A run that pauses for the user's approval of a destructive call (tests/servers/awkward.py).
PAUSED_RUN = "import servers.awkward_names as aw\nawait aw.delete_item(item_id='7')\nresult = 'deleted'"
REPLICA = "replica-a"
#: From the signal to the exit, beyond the drain: the stop grace, closing the tool servers and the
#: HTTP connections, with slack for a loaded machine.
EXIT_BOUND_S = STOP_GRACE_S + 15.0
STAGE_TIMEOUT_S = 60.0
NEW_RUN = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
           "params": {"name": "run_python", "arguments": {"code": "result = 1"}}}  # fmt: skip


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    port: int
    tmp: Path
    state: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def audit(self) -> list[dict[str, Any]]:
        path = self.state / "wasmexec" / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def serve(tmp_path: Path, runtime: Runtime) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def start(*options: str) -> Replica:
        tmp, state = tmp_path / "tmp", tmp_path / "state"
        tmp.mkdir()
        state.mkdir()
        config = tmp_path / "mcp.json"
        awkward = {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]}
        config.write_text(json.dumps({"mcpServers": {"awkward-names": awkward}}))
        env = {**os.environ, **child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory), TMPDIR=str(tmp),
                                         XDG_STATE_HOME=str(state))}  # fmt: skip
        options = ("--config", str(config), "--timeout-ms", "120000", "--replica-id", REPLICA, *options)
        process, port = start_serve_http(options, env, tmp_path / "stderr")
        replica = Replica(process, port, tmp, state)
        started.append(replica)
        wait_for_health(port, process, tmp_path / "stderr")
        return replica

    yield start
    for replica in started:
        if replica.process.poll() is None:
            replica.process.kill()
            replica.process.wait()


def _health(replica: Replica) -> tuple[int, dict[str, Any]] | None:
    try:
        response = httpx2.get(replica.base + "/healthz", timeout=5, trust_env=False)
    except httpx2.HTTPError:
        return None
    return response.status_code, response.json()


async def _until(ready: Callable[[], bool], what: str, timeout: float = STAGE_TIMEOUT_S) -> None:
    with anyio.fail_after(timeout):
        while not ready():
            await anyio.sleep(0.02)


def _running(replica: Replica) -> bool:
    return any(replica.tmp.glob("wasmexec-runs-*/*/tmp/started"))


def _refused_retryably(replica: Replica) -> None:
    """A new run_python call, as a proxy sends it, is refused with 503 and Retry-After: retry elsewhere."""
    response = httpx2.post(replica.url, json=NEW_RUN, timeout=10, trust_env=False,
                           headers={"accept": "application/json, text/event-stream"})  # fmt: skip
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    assert body["id"] == 9 and body["error"]["data"]["retryable"] is True, body
    assert "draining" in body["error"]["message"], body
    initialize = {"jsonrpc": "2.0", "id": 10, "method": "initialize", "params": {}}  # a new 2025-era session
    response = httpx2.post(replica.url, json=initialize, timeout=10, trust_env=False,
                           headers={"accept": "application/json, text/event-stream"})  # fmt: skip
    assert response.status_code == 503 and response.json()["id"] == 10, response.text


def _exited_clean(replica: Replica, signalled: float, bound: float) -> None:
    wait_until(lambda: replica.process.poll() is not None, "the server to exit", bound)
    assert time.monotonic() - signalled < bound
    assert replica.process.returncode == 0
    left = [str(path) for path in replica.tmp.rglob("*") if "wasmexec" in str(path)]
    assert left == []
    lines = replica.audit()
    assert lines and all(line.get("replica") == REPLICA for line in lines), lines


def _call_during(replica: Replica, mode: str, code: str, during: Callable[[], None]) -> Any:
    """Calls run_python with `code`; once the run is in flight, SIGTERMs the server and calls `during()` (on a
    worker thread); returns the call's result (or the exception the client raised) and when it was signalled."""
    outcome: dict[str, Any] = {}

    async def main() -> None:
        with anyio.fail_after(STAGE_TIMEOUT_S + RUN_S + EXIT_BOUND_S):
            try:
                async with Client(replica.url, mode=mode) as client:  # type: ignore[arg-type]
                    async with anyio.create_task_group() as group:

                        async def call() -> None:
                            try:
                                outcome["result"] = await client.call_tool("run_python", {"code": code})
                            except Exception as exc:  # reported to the test, which decides
                                outcome["result"] = exc

                        group.start_soon(call)
                        await _until(lambda: _running(replica), "the run to start")
                        outcome["signalled"] = time.monotonic()
                        replica.process.send_signal(signal.SIGTERM)
                        try:
                            await anyio.to_thread.run_sync(during)
                        except BaseException as exc:  # kept apart from what the transport raises below
                            outcome["during"] = exc
            except Exception as exc:  # closing the session of a server that has exited: expected once signalled
                if "signalled" not in outcome or "during" in outcome:
                    raise
                # The transport saw the server go before the call returned (the call's task was cancelled with
                # the session): that is what the call got.
                outcome.setdefault("result", exc)

    anyio.run(main)
    if "during" in outcome:
        raise outcome["during"]
    return outcome["result"], outcome["signalled"]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025", "2026"])
def test_sigterm_drains_a_running_call_which_gets_its_whole_result_and_the_server_exits_0(
    serve: Callable[..., Replica], mode: str
) -> None:
    replica = serve("--drain-timeout", "60")

    def during_the_drain() -> None:
        wait_until(lambda: (_health(replica) or (0, {}))[0] == 503, "/healthz to answer 503")
        document = (_health(replica) or (0, {}))[1]
        assert document["status"] == "draining" and document["replica"] == REPLICA, document
        _refused_retryably(replica)

    result, signalled = _call_during(replica, mode, LONG_RUN, during_the_drain)
    assert not isinstance(result, Exception), result
    assert result.structured_content["result"] == {**result.structured_content["result"], "ok": True,
                                                   "data": "finished"}  # fmt: skip
    _exited_clean(replica, signalled, RUN_S + EXIT_BOUND_S)
    (run,) = [line for line in replica.audit() if line["kind"] == "run"]
    assert run["outcome"] == "ok"


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025", "2026"])
def test_a_run_still_going_at_the_drain_timeout_is_stopped_audited_and_the_server_exits_0(
    serve: Callable[..., Replica], mode: str
) -> None:
    drain_s = 2
    replica = serve("--drain-timeout", str(drain_s))
    result, signalled = _call_during(replica, mode, ENDLESS_RUN, lambda: None)
    _exited_clean(replica, signalled, drain_s + EXIT_BOUND_S)
    if not isinstance(result, Exception):  # the client may also see the server go first
        assert result.structured_content["result"]["ok"] is False, result
    (run,) = [line for line in replica.audit() if line["kind"] == "run"]
    assert run["outcome"] != "ok", run


def test_a_2025_approval_nobody_answers_by_the_drain_timeout_is_audited_as_abandoned(
    serve: Callable[..., Replica],
) -> None:
    replica = serve("--drain-timeout", "1")
    asked, release = anyio.Event(), anyio.Event()
    signalled: list[float] = []

    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        asked.set()
        await release.wait()  # this user never answers before the server stops
        return ElicitResult(action="decline")

    async def main() -> None:
        with anyio.fail_after(STAGE_TIMEOUT_S + EXIT_BOUND_S):
            try:
                async with Client(replica.url, mode="legacy", elicitation_callback=on_elicit) as client:
                    async with anyio.create_task_group() as group:

                        async def call() -> None:
                            try:
                                await client.call_tool("run_python", {"code": PAUSED_RUN})
                            except Exception:  # the server went away under the call: it was told to stop
                                pass

                        group.start_soon(call)
                        await asked.wait()
                        signalled.append(time.monotonic())
                        replica.process.send_signal(signal.SIGTERM)
                        await _until(lambda: replica.process.poll() is not None, "the server to exit", EXIT_BOUND_S)
                        release.set()
            except Exception:  # the client noticed the server going away
                pass

    anyio.run(main)
    _exited_clean(replica, signalled[0], 1 + EXIT_BOUND_S)
    lines = replica.audit()
    (run,) = [line for line in lines if line["kind"] == "run"]
    assert run["approval"] == "DENIED", run
    (abandoned,) = [line for line in lines if line["kind"] == "abandoned"]
    assert abandoned["run_id"] == run["run_id"] and abandoned["waiting_on"] == "approval", abandoned


def test_sigint_stops_at_once_without_draining(serve: Callable[..., Replica]) -> None:
    replica = serve("--drain-timeout", "600")
    outcome: list[Any] = []

    async def main() -> None:
        with anyio.fail_after(STAGE_TIMEOUT_S + EXIT_BOUND_S):
            try:
                async with Client(replica.url, mode="auto") as client:
                    async with anyio.create_task_group() as group:

                        async def call() -> None:
                            try:
                                outcome.append(await client.call_tool("run_python", {"code": ENDLESS_RUN}))
                            except Exception as exc:
                                outcome.append(exc)

                        group.start_soon(call)
                        await _until(lambda: _running(replica), "the run to start")
                        signalled.append(time.monotonic())
                        replica.process.send_signal(signal.SIGINT)
            except Exception as exc:  # the connection dies with the server, by design
                # When the signal lands before the server has sent the call's response headers, the client's
                # own transport task fails with the connection and its task group raises as the client closes.
                outcome.append(exc)

    signalled: list[float] = []
    anyio.run(main)
    _exited_clean(replica, signalled[0], EXIT_BOUND_S)
    (run,) = [line for line in replica.audit() if line["kind"] == "run"]
    assert run["outcome"] != "ok", run


def test_healthz_names_the_replica(serve: Callable[..., Replica]) -> None:
    replica = serve()
    status, document = _health(replica) or (0, {})
    assert status == 200 and document["status"] == "ok" and document["replica"] == REPLICA, document
