"""The replica set, end to end: two `wasmexec serve --http` replicas behind HAProxy, all on loopback.

HAProxy (Debian's, installed by .ci/run) runs deploy/haproxy.cfg with only its `bind` and `server`
lines rewritten for the test's ports; it names the replica that answered in an `X-Replica` header,
which the clients record. Both replicas share one audit log (each line names its replica), one ledger
(tests/servers/ledger.py: a destructive tool whose every run leaves a line on disk),
one --state-dir, one --state-key-file and one --auth-token-file.

Every loop is bounded, every process is stopped at the end of its fixture, nothing leaves loopback.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult

from tests.helpers import data_of, free_port, haproxy, start_serve_http, wait_for_health, wait_until
from tests.integration.conftest import SERVERS, child_env
from wasmexec import Runtime
from wasmexec._server.resources import artifact_uri
from wasmexec._server.shutdown import STOP_GRACE_S

pytestmark = pytest.mark.slow

HAPROXY_CFG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"
NAMES = ("replica-1", "replica-2")
PRINCIPALS = ("alice", "bob")
#: What a replica may take to start (load the sandbox), on a loaded two-core machine.
START_S = 90.0
#: From a signal to the exit, beyond the drain (as in tests/integration/test_serve_drain.py).
EXIT_BOUND_S = STOP_GRACE_S + 15.0
#: Concurrent clients: enough to overlap requests on both replicas without swamping two cores.
CONCURRENCY = 4
#: A run that lasts long enough for the test to signal its replica and use the other one meanwhile.
RUN_S = 8
LONG_RUN = f"open('/tmp/started', 'w').write('x')\nimport time\ntime.sleep({RUN_S})\nresult = 'finished'"
#: A destructive call: the user is asked first, and the ledger shows whether (and how often) it ran.
RECORD = "import servers.ledger as ledger\nawait ledger.record(entry={entry!r})\nresult = 'recorded'"


@dataclass
class Replica:
    name: str
    port: int
    tmp: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def running_a_run(self) -> bool:
        return any(self.tmp.glob("wasmexec-runs-*/*/tmp/started"))


@dataclass
class ReplicaSet:
    root: Path
    proxy_port: int = 0
    replicas: dict[str, Replica] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    """principal -> bearer token; empty while `serve` has no --auth-token-file."""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}/mcp"

    @property
    def audit(self) -> Path:
        return self.root / "audit.jsonl"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger"

    def runs(self, since: float = 0.0) -> list[dict[str, Any]]:
        """The shared audit log's run lines written since `since` (wall clock)."""
        if not self.audit.exists():
            return []
        lines = [json.loads(line) for line in self.audit.read_text().splitlines()]
        return [line for line in lines if line["kind"] == "run" and line["time"] >= since]

    def ledger_entries(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []

    def other(self, name: str) -> Replica:
        (other,) = [replica for replica in self.replicas.values() if replica.name != name]
        return other


def _shared_flags(root: Path) -> tuple[list[str], dict[str, str]]:
    """One --state-dir, one --state-key-file and one --auth-token-file for both replicas; the principals' tokens."""
    (root / "state").mkdir(mode=0o700)
    key = root / "state.key"
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    tokens = {principal: secrets.token_urlsafe(32) for principal in PRINCIPALS}
    token_file = root / "tokens"
    token_file.write_text("".join(f"{principal} {token}\n" for principal, token in tokens.items()))
    token_file.chmod(0o600)
    return [
        "--state-dir",
        str(root / "state"),
        "--state-key-file",
        str(key),
        "--auth-token-file",
        str(token_file),
    ], tokens


def _start_replica(replica_set: ReplicaSet, name: str, runtime: Runtime, flags: list[str]) -> Replica:
    tmp = replica_set.root / name / "tmp"
    tmp.mkdir(parents=True)
    config = replica_set.root / "mcp.json"
    if not config.exists():
        servers = {"ledger": {"command": sys.executable, "args": [str(SERVERS / "ledger.py")],
                              "env": {"LEDGER_PATH": str(replica_set.ledger)}},
                   "awkward-names": {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]}}  # fmt: skip
        config.write_text(json.dumps({"mcpServers": servers}))
    env = {**os.environ, **child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory), TMPDIR=str(tmp),
                                     XDG_STATE_HOME=str(replica_set.root / name / "state"))}  # fmt: skip
    options = ["--replica-id", name, "--config", str(config), "--audit-log", str(replica_set.audit), "--timeout-ms",
               "120000", "--drain-timeout", "60", *flags]  # fmt: skip
    process, port = start_serve_http(options, env, replica_set.root / name / "stderr")
    replica_set.processes.append(process)
    replica = Replica(name, port, tmp, process)
    replica_set.replicas[name] = replica
    return replica


def haproxy_config(proxy_port: int, replicas: dict[str, int]) -> str:
    """deploy/haproxy.cfg with loopback ports (replica name -> port): its `bind` line, and its `server` lines
    (at the end) replaced; logging to stdout added. benchmarks/bench_replicas.py uses it too."""
    text = HAPROXY_CFG.read_text()
    text, binds = re.subn(r"^(\s*)bind \S+$", rf"\g<1>bind 127.0.0.1:{proxy_port}", text, flags=re.MULTILINE)
    lines = text.rstrip().splitlines()
    assert binds == 1 and lines[-1].strip().startswith("server "), "deploy/haproxy.cfg changed shape"
    while lines[-1].strip().startswith("server "):
        lines.pop()
    lines += [f"    server {name} 127.0.0.1:{port}" for name, port in replicas.items()]
    text = "\n".join(lines) + "\n"
    # Its log (haproxy.log beside the test's files) says where each request went and why.
    text = text.replace("\nglobal\n", "\nglobal\n    log stdout format raw local0 info\n", 1)
    return text.replace("\ndefaults\n", "\ndefaults\n    log global\n    option httplog\n", 1)


@pytest.fixture
def replica_set(tmp_path: Path, runtime: Runtime) -> Iterator[ReplicaSet]:
    proxy = haproxy()
    replica_set = ReplicaSet(tmp_path)
    flags, replica_set.tokens = _shared_flags(tmp_path)
    try:
        for name in NAMES:
            _start_replica(replica_set, name, runtime, flags)
        for replica in replica_set.replicas.values():
            _wait_for_replica(replica, tmp_path)
        replica_set.proxy_port = free_port()
        config = tmp_path / "haproxy.cfg"
        config.write_text(
            haproxy_config(replica_set.proxy_port, {r.name: r.port for r in replica_set.replicas.values()})
        )
        with (tmp_path / "haproxy.log").open("wb") as log:
            replica_set.processes.append(subprocess.Popen([proxy, "-db", "-f", str(config)], stdout=log,
                                                          stderr=subprocess.STDOUT))  # fmt: skip
        _wait_for_both_behind_the_proxy(replica_set)
        yield replica_set
    finally:
        for process in reversed(replica_set.processes):
            if process.poll() is None:
                process.kill()
                process.wait()


def _wait_for_replica(replica: Replica, root: Path) -> None:
    wait_for_health(replica.port, replica.process, root / replica.name / "stderr", START_S)


def _wait_for_both_behind_the_proxy(replica_set: ReplicaSet) -> None:
    """Until HAProxy has sent a health request to each replica (its checks found both up)."""
    seen: set[str] = set()

    def both() -> bool:
        try:
            response = httpx2.get(replica_set.url.removesuffix("/mcp") + "/healthz", timeout=5, trust_env=False)
        except httpx2.HTTPError:
            return False
        seen.add(response.headers.get("x-replica", ""))
        return set(NAMES) <= seen

    wait_until(both, "HAProxy to reach both replicas", START_S)


@asynccontextmanager
async def _connect(
    url: str, mode: str, seen: list[str] | None = None, token: str | None = None, **options: Any
) -> AsyncIterator[Client]:
    """A client of `url` in `mode` (legacy: 2025 era; auto: 2026-07-28), recording each response's X-Replica."""

    async def record(response: httpx2.Response) -> None:
        if seen is not None:
            seen.append(response.headers.get("x-replica", ""))

    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300), trust_env=False,
                                  event_hooks={"response": [record]}) as http:  # fmt: skip
        async with Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client:  # type: ignore[arg-type]
            yield client


def _approve(seen: list[str] | None = None, before: Callable[[], Awaitable[None]] | None = None) -> Any:
    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        if before is not None:
            await before()
        return ElicitResult(action="accept", content={"approve": True})

    return on_elicit


async def _bounded(count: int, work: Callable[[int], Awaitable[None]]) -> None:
    """Runs work(0) … work(count - 1), CONCURRENCY at a time."""
    limiter = anyio.CapacityLimiter(CONCURRENCY)

    async def one(index: int) -> None:
        async with limiter:
            await work(index)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)


def _run(main: Callable[[], Awaitable[None]], timeout: float = 300.0) -> None:
    async def bounded() -> None:
        with anyio.fail_after(timeout):
            await main()

    anyio.run(bounded)


def _structured(result: Any) -> dict[str, Any]:
    structured = result.structured_content
    assert isinstance(structured, dict), result
    return structured


# --- what works on main today -------------------------------------------------------------------------------------


def test_2025_sessions_stay_on_the_replica_that_opened_them_through_runs_and_an_approval(
    replica_set: ReplicaSet,
) -> None:
    sessions, runs_each = 20, 5
    replicas_of: dict[int, set[str]] = {}
    token = replica_set.tokens.get("alice")

    async def session(index: int) -> None:
        seen: list[str] = []
        async with _connect(replica_set.url, "legacy", seen, token, elicitation_callback=_approve()) as client:
            assert client.protocol_version.startswith("2025")
            for n in range(runs_each):
                result = await client.call_tool("run_python", {"code": f"result = {n} * {index}"})
                assert data_of(_structured(result)) == n * index
            approved = _structured(await client.call_tool("run_python", {"code": RECORD.format(entry=f"s{index}")}))
            assert approved["approval_state"] == "APPROVED" and data_of(approved) == "recorded"
        replicas_of[index] = set(seen)

    started = time.time()
    _run(lambda: _bounded(sessions, session))
    assert all(len(names) == 1 for names in replicas_of.values()), replicas_of
    assert {name for names in replicas_of.values() for name in names} == set(NAMES), "roundrobin opened sessions"
    assert sorted(replica_set.ledger_entries()) == sorted(f"s{index}" for index in range(sessions))
    runs = replica_set.runs(started)
    assert len(runs) == sessions * (runs_each + 1) and {run["replica"] for run in runs} == set(NAMES)


def test_2026_runs_are_spread_over_both_replicas(replica_set: ReplicaSet) -> None:
    count = 40
    token = replica_set.tokens.get("alice")

    async def main() -> None:
        async with _connect(replica_set.url, "auto", token=token) as client:
            assert client.protocol_version.startswith("2026")

            async def run(index: int) -> None:
                assert (
                    data_of(_structured(await client.call_tool("run_python", {"code": f"result = {index}"}))) == index
                )

            await _bounded(count, run)

    started = time.time()
    _run(main)
    by_replica = Counter(run["replica"] for run in replica_set.runs(started))
    assert sum(by_replica.values()) == count and all(by_replica[name] >= count // 4 for name in NAMES), by_replica


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["2025", "2026"])
def test_sigterm_of_one_replica_during_a_run_delivers_its_answer_while_the_other_keeps_serving(
    replica_set: ReplicaSet, mode: str
) -> None:
    token = replica_set.tokens.get("alice")
    outcome: dict[str, Any] = {}

    async def during_the_drain(victim: Replica) -> None:
        """New sessions and runs through the proxy all work: the draining replica refuses them retryably
        (503, retried by HAProxy on the other) until the health checks take it out of the rotation."""
        for index in range(4):
            async with _connect(replica_set.url, mode, token=token) as client:
                result = await client.call_tool("run_python", {"code": f"result = {index}"})
                assert data_of(_structured(result)) == index

    async def main() -> None:
        async with _connect(replica_set.url, mode, token=token) as client:
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    outcome["result"] = await client.call_tool("run_python", {"code": LONG_RUN})

                group.start_soon(call)
                await _until(lambda: any(r.running_a_run() for r in replica_set.replicas.values()), "the run")
                (victim,) = [r for r in replica_set.replicas.values() if r.running_a_run()]
                outcome["victim"], outcome["signalled"] = victim, time.monotonic()
                victim.process.send_signal(signal.SIGTERM)
                await during_the_drain(victim)

    started = time.time()
    _run(main)
    assert data_of(_structured(outcome["result"])) == "finished"
    victim: Replica = outcome["victim"]
    by_replica = Counter(run["replica"] for run in replica_set.runs(started))
    assert by_replica[victim.name] == 1, by_replica  # the long run only: every new one went to the other
    wait_until(lambda: victim.process.poll() is not None, f"{victim.name} to exit", RUN_S + EXIT_BOUND_S)
    assert victim.process.returncode == 0
    assert not any(victim.tmp.iterdir()), list(victim.tmp.iterdir())
    survivor = replica_set.other(victim.name)
    assert survivor.process.poll() is None

    async def after() -> None:
        async with _connect(replica_set.url, mode, token=token) as client:
            assert data_of(_structured(await client.call_tool("run_python", {"code": "result = 'still here'"})))

    _run(after)


def test_a_2025_approval_answered_while_its_replica_drains_reaches_its_run_through_the_proxy(
    replica_set: ReplicaSet,
) -> None:
    seen: list[str] = []
    token = replica_set.tokens.get("alice")
    holder: list[Replica] = []

    async def drain_first() -> None:
        """SIGTERM the session's replica, and answer only once HAProxy's health checks took it out of rotation."""
        replica = replica_set.replicas[seen[0]]  # the replica that answered `initialize` holds the session
        holder.append(replica)
        replica.process.send_signal(signal.SIGTERM)
        # HAProxy logs the health checks' verdict; requests through it cannot tell (a 503 is retried elsewhere).
        down = f"Server wasmexec/{replica.name} is DOWN"
        await _until(lambda: down in (replica_set.root / "haproxy.log").read_text(), "HAProxy to take it out")

    async def main() -> None:
        async with _connect(replica_set.url, "legacy", seen, token,
                            elicitation_callback=_approve(before=drain_first)) as client:  # fmt: skip
            result = _structured(await client.call_tool("run_python", {"code": RECORD.format(entry="drained")}))
            assert result["approval_state"] == "APPROVED" and data_of(result) == "recorded", result

    _run(main)
    assert replica_set.ledger_entries() == ["drained"]
    (replica,) = holder
    wait_until(lambda: replica.process.poll() is not None, f"{replica.name} to exit", EXIT_BOUND_S)
    assert replica.process.returncode == 0


async def _until(ready: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    with anyio.fail_after(timeout):
        while not ready():
            await anyio.sleep(0.02)


# --- the integrator's checklist: cases that need the other issue-16 branches ----------------------------------------


async def _session_with_file(url: str, token: str | None) -> str:
    async with _connect(url, "auto", token=token) as client:
        code = "open('/workspace/note.txt', 'w').write('written on one replica')\nresult = 'ok'"
        created = _structured(await client.call_tool("run_python", {"code": code, "session": True}))
        data_of(created)
        return str(created["session_id"])


async def _read_note(url: str, token: str | None, session_id: str) -> str:
    async with _connect(url, "auto", token=token) as client:
        code = "result = open('/workspace/note.txt').read()"
        return str(data_of(_structured(await client.call_tool("run_python", {"code": code, "session_id": session_id}))))


def test_a_session_written_on_one_replica_is_read_through_roundrobin_10_of_10(replica_set: ReplicaSet) -> None:
    token = replica_set.tokens.get("alice")

    async def main() -> None:
        session_id = await _session_with_file(replica_set.replicas[NAMES[0]].url, token)
        for _ in range(10):
            assert await _read_note(replica_set.url, token, session_id) == "written on one replica"

    _run(main)


def test_a_session_outlives_the_replica_that_wrote_it(replica_set: ReplicaSet) -> None:
    token = replica_set.tokens.get("alice")
    first = replica_set.replicas[NAMES[0]]

    async def main() -> None:
        session_id = await _session_with_file(first.url, token)
        first.process.send_signal(signal.SIGTERM)
        await _until(lambda: first.process.poll() is not None, "the first replica to exit", EXIT_BOUND_S)
        for _ in range(3):
            assert await _read_note(replica_set.url, token, session_id) == "written on one replica"

    _run(main)


def test_a_2026_approval_paused_on_a_replica_that_is_then_killed_completes_on_the_other_exactly_once(
    replica_set: ReplicaSet,
) -> None:
    seen: list[str] = []
    token = replica_set.tokens.get("alice")

    async def kill_where_it_paused() -> None:
        paused_on = replica_set.replicas[seen[-1]]  # the replica that answered input-required
        paused_on.process.kill()
        await _until(lambda: paused_on.process.poll() is not None, "the killed replica to be gone")

    async def main() -> None:
        async with _connect(replica_set.url, "auto", seen, token,
                            elicitation_callback=_approve(before=kill_where_it_paused)) as client:  # fmt: skip
            result = _structured(await client.call_tool("run_python", {"code": RECORD.format(entry="once")}))
            assert result["approval_state"] == "APPROVED" and data_of(result) == "recorded"

    _run(main)
    assert replica_set.ledger_entries() == ["once"]


def test_2026_approvals_through_roundrobin_complete_10_of_10_each_exactly_once(replica_set: ReplicaSet) -> None:
    token = replica_set.tokens.get("alice")

    async def main() -> None:
        async with _connect(replica_set.url, "auto", token=token, elicitation_callback=_approve()) as client:
            for index in range(10):
                result = _structured(await client.call_tool("run_python", {"code": RECORD.format(entry=f"a{index}")}))
                assert result["approval_state"] == "APPROVED" and data_of(result) == "recorded"

    _run(main)
    assert sorted(replica_set.ledger_entries()) == sorted(f"a{index}" for index in range(10))


class _RewritingTransport(httpx2.AsyncBaseTransport):
    """Rewrites the client's retry of a paused call (the request carrying `requestState`) before it is sent."""

    def __init__(self, rewrite: Callable[[dict[str, Any], dict[str, str]], None]) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._rewrite = rewrite

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        try:
            message = json.loads(request.content) if request.content else None
        except ValueError:
            message = None
        params = message.get("params") if isinstance(message, dict) else None
        if isinstance(params, dict) and (params.get("requestState") or params.get("request_state")):
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            self._rewrite(params, headers)
            request = httpx2.Request(request.method, request.url, headers=headers, content=json.dumps(message).encode())
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _tamper(params: dict[str, Any], headers: dict[str, str]) -> None:
    key = "requestState" if "requestState" in params else "request_state"
    state = str(params[key])
    middle = len(state) // 2
    params[key] = state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]


def _other_request(params: dict[str, Any], headers: dict[str, str]) -> None:
    params["arguments"] = {**params.get("arguments", {}), "code": RECORD.format(entry="swapped")}


def _unchanged(params: dict[str, Any], headers: dict[str, str]) -> None:
    pass


@pytest.mark.parametrize("case", ["tampered", "other-request", "other-principal", "expired"])
def test_a_2026_approval_state_that_is_tampered_expired_or_not_the_callers_is_refused_and_nothing_runs(
    replica_set: ReplicaSet, case: str
) -> None:
    tokens = replica_set.tokens

    def other_principal(params: dict[str, Any], headers: dict[str, str]) -> None:
        headers["authorization"] = f"Bearer {tokens['bob']}"

    rewrite = {"tampered": _tamper, "other-request": _other_request, "other-principal": other_principal,
               "expired": _unchanged}[case]  # fmt: skip
    arguments: dict[str, Any] = {"code": RECORD.format(entry=case)}

    async def wait_past_the_deadline() -> None:
        # What is tested is the passing of time itself: the state expires with the run's deadline.
        await anyio.sleep(arguments.get("timeout_ms", 0) / 1000 + 1)

    if case == "expired":
        arguments["timeout_ms"] = 2000

    async def main() -> None:
        token = tokens.get("alice")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300), trust_env=False,
                                      transport=_RewritingTransport(rewrite)) as http:  # fmt: skip
            approve = _approve(before=wait_past_the_deadline if case == "expired" else None)
            # One replica: the paused run is there on every branch, so only the state decides.
            direct = replica_set.replicas[NAMES[0]].url
            async with Client(streamable_http_client(direct, http_client=http), mode="auto",
                              elicitation_callback=approve) as client:  # fmt: skip
                try:
                    result = _structured(await client.call_tool("run_python", arguments))
                except MCPError:  # refused as a protocol error (-32602): what is expected
                    return
                assert result["result"]["ok"] is False, result

    _run(main)
    assert replica_set.ledger_entries() == []


def test_principal_b_cannot_use_principal_as_session_or_artifacts_on_either_replica(replica_set: ReplicaSet) -> None:
    tokens = replica_set.tokens

    async def main() -> None:
        first = replica_set.replicas[NAMES[0]]
        async with _connect(first.url, "auto", token=tokens["alice"]) as client:
            code = "open('/workspace/secret.txt', 'w').write('alice only')\nresult = 'ok'"
            created = _structured(await client.call_tool("run_python", {"code": code, "session": True}))
            data_of(created)
        run_id, artifacts = created["run_id"], created["artifacts"]
        session_id, uris = created["session_id"], [artifact_uri(run_id, artifact["path"]) for artifact in artifacts]
        assert uris, created
        for replica in replica_set.replicas.values():
            async with _connect(replica.url, "auto", token=tokens["bob"]) as client:
                code = "result = open('/workspace/secret.txt').read()"
                try:
                    result = _structured(await client.call_tool("run_python", {"code": code, "session_id": session_id}))
                except MCPError:  # refused as a protocol error: expected
                    pass
                else:
                    assert result["result"]["ok"] is False and "alice only" not in json.dumps(result), result
                for uri in uris:
                    with pytest.raises(MCPError):
                        await client.read_resource(uri)

    _run(main)
