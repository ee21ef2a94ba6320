"""SIGTERM and SIGINT end `wasmexec serve` cleanly, over stdio and over HTTP, at every stage of a run.

A real `wasmexec serve` subprocess, a real MCP client, a real tool server (tests/servers/awkward.py,
whose `delete_item` is destructive, so it needs the user's approval). The server gets its own
TMPDIR and XDG_STATE_HOME, so whatever it leaves behind is there to see. At each stage (idle after a
run that wrote files, a run busy in a loop, a run paused for approval in both protocol eras, a run
printing while the client reads its output) the test signals the server, then checks: exit status 0
within a bound, nothing of wasmexec's left in TMPDIR, no run's own data in the state dir, one audit line
per run (the paused one too), and the tool server gone.

Over stdio the client starts the server through a small wrapper that writes the server's pid and,
when it ends, its exit status: the client owns the pipes, the test needs the process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult

from tests.helpers import descendants, free_port, wait_until
from tests.integration.conftest import SERVERS, child_env
from wasmexec import Runtime
from wasmexec._server.shutdown import STOP_GRACE_S

#: From the signal to the process's exit: the stop grace, plus closing the tool servers (each may
#: take the SDK's 2 s to end) and the HTTP connections, with slack for a loaded two-core machine.
EXIT_BOUND_S = STOP_GRACE_S + 15.0
#: How long a stage may take to be reached (the server starts, the run starts).
STAGE_TIMEOUT_S = 60.0
#: Long enough that no run ends by itself before the signal.
RUN_TIMEOUT_MS = 120_000

#: Every run first calls a tool, so the tool server runs (a cached listing would not start it).
CALL = "import servers.awkward_names as aw\nawait aw.echo_args(x=1)\n"
CODES = {
    # A finished run that wrote an artifact and a /tmp file: the store and a run directory hold them.
    "idle": CALL + "open('/workspace/out.txt', 'w').write('x' * 100)\nopen('/tmp/scratch', 'w').write('y')\n"
    "result = 'done'",
    # The marker in /tmp tells the test (which sees the run directory in TMPDIR) the guest runs.
    "running": CALL + "open('/tmp/started', 'w').write('x')\nwhile True:\n    pass",
    "streaming": CALL + "import time\nn = 0\nwhile True:\n    print('tick', n)\n    n += 1\n    time.sleep(0.05)",
    "paused": CALL + "await aw.delete_item(item_id='7')\nresult = 'deleted'",
}

#: Starts the command after it, writes its pid to <argv[1]>.pid and its exit status to argv[1].
WRAPPER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
with open(sys.argv[1] + '.pid', 'w') as f:
    f.write(str(child.pid))
status = child.wait()
with open(sys.argv[1] + '.tmp', 'w') as f:
    f.write(str(status))
os.replace(sys.argv[1] + '.tmp', sys.argv[1])
"""


@dataclass
class Served:
    """One `wasmexec serve` process and where it keeps things."""

    tmp: Path
    state: Path
    pid: int = 0
    exit_status: Callable[[], int | None] = lambda: None
    descendants: set[int] = field(default_factory=set)

    @property
    def audit(self) -> Path:
        return self.state / "wasmexec" / "audit.jsonl"


def _command(tmp_path: Path) -> list[str]:
    config = tmp_path / "mcp.json"
    awkward = {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]}
    config.write_text(json.dumps({"mcpServers": {"awkward-names": awkward}}))
    return [sys.executable, "-m", "wasmexec", "serve", "--config", str(config), "--timeout-ms", str(RUN_TIMEOUT_MS)]


def _env(served: Served, runtime: Runtime) -> dict[str, str]:
    return child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory), TMPDIR=str(served.tmp),
                     XDG_STATE_HOME=str(served.state))  # fmt: skip


def _served(tmp_path: Path) -> Served:
    served = Served(tmp_path / "tmp", tmp_path / "state")
    served.tmp.mkdir()
    served.state.mkdir()
    return served


@contextmanager
def _stdio(tmp_path: Path, runtime: Runtime) -> Iterator[tuple[Served, Any]]:
    served = _served(tmp_path)
    status = tmp_path / "status"
    command = _command(tmp_path)
    params = StdioServerParameters(command=sys.executable, args=["-c", WRAPPER, str(status), *command],
                                   env=_env(served, runtime))  # fmt: skip

    def exit_status() -> int | None:
        return int(status.read_text()) if status.exists() else None

    served.exit_status = exit_status
    yield served, params


@contextmanager
def _http(tmp_path: Path, runtime: Runtime) -> Iterator[tuple[Served, Any]]:
    served = _served(tmp_path)
    port = free_port()
    with (tmp_path / "stderr").open("wb") as stderr:
        # --drain-timeout 0: SIGTERM stops the runs at once here (tests/integration/test_serve_drain.py drains).
        process = subprocess.Popen([*_command(tmp_path), "--http", "--port", str(port), "--drain-timeout", "0"],
                                   env={**os.environ,
                                   **_env(served, runtime)}, stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    try:
        wait_until(lambda: _accepts(port) or process.poll() is not None, "the server to listen")
        assert process.poll() is None, (tmp_path / "stderr").read_text()
        served.pid, served.exit_status = process.pid, process.poll
        yield served, f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _accepts(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; its parent (gone too) just has not reaped it


@dataclass
class Stage:
    """What the client does, and how the test knows the stage is reached."""

    reached: anyio.Event = field(default_factory=anyio.Event)
    released: anyio.Event = field(default_factory=anyio.Event)
    outcome: list[Any] = field(default_factory=list)
    signalled: float = 0.0
    """When the signal was sent (monotonic); 0 before."""


def _client_options(stage: Stage) -> dict[str, Any]:
    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        stage.reached.set()  # the run waits for the user; this user never answers before the signal
        await stage.released.wait()
        return ElicitResult(action="decline")

    return {"elicitation_callback": on_elicit}


async def _drive(client: Client, served: Served, name: str, stage: Stage) -> None:
    """Starts the stage's call and sets `stage.reached` once the server is in that stage."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if name == "streaming" and message and "tick" in message:
            stage.reached.set()

    try:
        result = await client.call_tool("run_python", {"code": CODES[name]}, progress_callback=on_progress)
        stage.outcome.append(result)
    except Exception as exc:  # the server went away under the call: allowed, it was told to stop
        stage.outcome.append(exc)
    if name == "idle":
        stage.reached.set()


def _running_marker(served: Served) -> bool:
    return any(served.tmp.glob("wasmexec-runs-*/*/tmp/started"))


def _scenario(target: Any, served: Served, name: str, mode: str, signum: int) -> Stage:
    """Connects, reaches the stage, signals the server, waits for its exit; returns what the client saw."""
    stage = Stage()

    async def main() -> None:
        with anyio.fail_after(STAGE_TIMEOUT_S + EXIT_BOUND_S + 30):
            async with anyio.create_task_group() as group:
                try:
                    async with Client(target, mode=mode, **_client_options(stage)) as client:  # type: ignore[arg-type]
                        await _in_stage(client, group, served, name, stage, signum)
                except Exception:  # the client may notice the server going away: expected once it was signalled
                    if not stage.signalled:
                        raise
                stage.released.set()
                await _until(lambda: served.exit_status() is not None, "the server to exit", EXIT_BOUND_S)
                assert time.monotonic() - stage.signalled < EXIT_BOUND_S

    anyio.run(main)
    return stage


async def _in_stage(client: Client, group: Any, served: Served, name: str, stage: Stage, signum: int) -> None:
    if not served.pid:  # over stdio: the wrapper wrote the server's pid
        pid_file = served.tmp.parent / "status.pid"
        await _until(lambda: pid_file.exists() and pid_file.read_text() != "", "the server's pid")
        served.pid = int(pid_file.read_text())
    group.start_soon(_drive, client, served, name, stage)
    with anyio.fail_after(STAGE_TIMEOUT_S):
        if name == "running":
            await _until(lambda: _running_marker(served), "the run to start")
        else:
            await stage.reached.wait()
    if name == "idle":
        # Kept in the state directory (sealed), for a later resources/read on any replica.
        assert any(served.state.glob("wasmexec/artifacts/*/*")), "the run's artifact should be kept"
    served.descendants = descendants(served.pid)
    assert served.descendants, ("the tool server runs", stage.outcome)
    stage.signalled = time.monotonic()
    os.kill(served.pid, signum)
    await _until(lambda: served.exit_status() is not None, "the server to exit", EXIT_BOUND_S)
    stage.released.set()


async def _until(ready: Callable[[], bool], what: str, timeout: float = STAGE_TIMEOUT_S) -> None:
    with anyio.fail_after(timeout):
        while not ready():
            await anyio.sleep(0.02)


def _check_clean(served: Served, name: str) -> None:
    status = served.exit_status()
    assert status == 0, f"exit status {status}"
    left = sorted(str(path.relative_to(served.tmp)) for path in served.tmp.rglob("*"))
    assert [path for path in left if "wasmexec" in path] == [], left
    state = sorted(str(path.relative_to(served.state)) for path in served.state.rglob("*"))
    # What belongs to the state directory stays (the audit, the key, artifacts and approval records for later
    # requests); no run's own directory does (sessions: none was used).
    kept = ("wasmexec/audit.jsonl", "wasmexec/servers.log", "wasmexec/state.key", "wasmexec/artifacts",
            "wasmexec/approvals")  # fmt: skip
    extra = [path for path in state if not path.startswith(kept)
             and path not in ("wasmexec", "wasmexec/sessions", "wasmexec/vaults")]  # fmt: skip
    assert extra == [], state
    lines = [json.loads(line) for line in served.audit.read_text().splitlines()]
    runs = [line for line in lines if line["kind"] == "run"]
    assert len(runs) == 1, lines
    if name == "paused":
        assert runs[0]["approval"] == "DENIED", runs
        (call,) = [line for line in lines if line["kind"] == "tool_call" and line["tool"] == "delete_item"]
        assert call["tool"] == "delete_item" and call["outcome"] != "ok", call
    if name == "idle":
        assert runs[0]["outcome"] == "ok", runs
    else:
        assert runs[0]["outcome"] != "ok", runs
    deadline = time.monotonic() + EXIT_BOUND_S
    while any(_alive(pid) for pid in served.descendants):
        assert time.monotonic() < deadline, f"still running: {[p for p in served.descendants if _alive(p)]}"
        time.sleep(0.05)


# (stage, client mode, signal): both eras where the era changes the path (a pause is a live request in
# 2025, a token between requests in 2026; 2025-era output streams over the call's SSE response).
CASES = [
    ("idle", "auto", signal.SIGTERM),
    ("idle", "auto", signal.SIGINT),
    ("running", "auto", signal.SIGTERM),
    ("running", "legacy", signal.SIGINT),
    ("streaming", "legacy", signal.SIGTERM),
    ("paused", "legacy", signal.SIGTERM),
    ("paused", "auto", signal.SIGTERM),
]
IDS = [f"{name}-{mode}-{signal.Signals(signum).name}" for name, mode, signum in CASES]
Transport = Callable[[Path, Runtime], Any]


@pytest.mark.parametrize("transport", [_stdio, _http], ids=["stdio", "http"])
@pytest.mark.parametrize(("name", "mode", "signum"), CASES, ids=IDS)
def test_a_signal_ends_serve_cleanly_with_exit_status_0_and_every_run_audited(
    tmp_path: Path, runtime: Runtime, transport: Transport, name: str, mode: str, signum: int
) -> None:
    with transport(tmp_path, runtime) as (served, target):
        stage = _scenario(target, served, name, mode, signum)
        _check_clean(served, name)
    if name == "idle":
        (result,) = stage.outcome
        assert not isinstance(result, Exception) and result.structured_content["result"]["ok"], result
