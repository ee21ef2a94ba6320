"""Ctrl-C during `wasmexec run`: the run stops promptly, the cancelled run's result line is printed, exit 130.

The code sleeps in a loop, busy-loops, or waits for a tool call (the loops never end by
themselves, so only the interrupt can end them).

How the test knows the run has started: output printed inside the sandbox reaches the terminal only
with the result line, at the end. So the code's first act is a tool call that leaves a mark outside
the process, `create_directory` on the filesystem reference server, and the test sends SIGINT once
that directory exists. The code is then in the middle of the run (answering the call, or already in
its sleep or busy loop), which is where Ctrl-C used to crash the process or be ignored.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import NODE_BIN, SERVERS
from wasmexec import Runtime, validate_run_result

#: How long the code would run if nobody stopped it; the test fails long before.
RUN_TIMEOUT_MS = 60_000
#: "Promptly": from SIGINT to the cancelled run's result line, with slack for a loaded two-core machine.
PROMPT_S = 5.0
#: The process must have started the run within this (it builds nothing: the component is cached).
START_TIMEOUT_S = 60.0

START = "import servers.files as f\nawait f.create_directory(path={marker!r})\n"
CODES = {
    "sleeping loop": START + "import time\nwhile True:\n    time.sleep(1)\n",
    "busy loop": START + "while True:\n    pass\n",
    "pending tool call": START + "import servers.slow as s\nawait s.sleep_for(seconds=30)\n",
    "final sleep": START + "import time\ntime.sleep(30)\n",
}
ATTEMPTS = [(kind, attempt) for kind in ("sleeping loop", "busy loop") for attempt in range(3)]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    files = {"command": str(NODE_BIN / "mcp-server-filesystem"), "args": [str(tmp_path)]}
    slow = {"command": sys.executable, "args": [str(SERVERS / "slow.py")]}
    path.write_text(json.dumps({"mcpServers": {"files": files, "slow": slow}}))
    return path


def _start(config: Path, code: str, runtime: Runtime) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "wasmexec", "run", "--config", str(config), "--no-audit",
               "--timeout-ms", str(RUN_TIMEOUT_MS), "-c", code]  # fmt: skip
    env = {**os.environ, "WASMEXEC_CACHE_DIR": str(runtime.artifacts.directory)}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(marker: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not marker.exists():
        if process.poll() is not None:
            pytest.fail(f"wasmexec run ended before the run started: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the run did not start within {START_TIMEOUT_S} s: {process.communicate()}")
        time.sleep(0.02)


def _interrupt(config: Path, runtime: Runtime, marker: Path, kind: str) -> tuple[dict[str, Any], str, float]:
    """Starts the run and sends SIGINT once it has started.

    Returns the result, stderr, and the seconds from SIGINT to the result line (the run stopped; the
    process then still stops its tool servers, which is not the run and may take longer).
    """
    process = _start(config, CODES[kind].format(marker=str(marker)), runtime)
    assert process.stdout is not None
    _wait_for(marker, process)
    process.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    ready, _, _ = select.select([process.stdout], [], [], PROMPT_S * 4)
    line = process.stdout.readline() if ready else ""
    stopped = time.monotonic() - interrupted
    try:
        rest, stderr = process.communicate(timeout=PROMPT_S * 4)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"Ctrl-C did not end `wasmexec run` ({kind}): {process.communicate()}")
    assert process.returncode == 130, (process.returncode, stderr)  # not -11 (a segfault), not 1
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert line.endswith("\n") and rest == "", (line, rest, stderr)
    result = json.loads(line)
    validate_run_result(result)
    return result, stderr, stopped


def _assert_cancelled(result: dict[str, Any]) -> None:
    assert result["result"]["ok"] is False, result
    assert "cancelled" in result["result"]["error"]["message"]
    assert [d["limit"] for d in result["diagnostics"] if d["code"] == "SANDBOX_LIMIT"] == ["cancelled"]


@pytest.mark.parametrize(("kind", "attempt"), [*ATTEMPTS, ("pending tool call", 0)])
def test_ctrl_c_stops_the_run_promptly_prints_the_cancelled_result_and_exits_130(
    config: Path, runtime: Runtime, tmp_path: Path, kind: str, attempt: int
) -> None:
    result, _, elapsed = _interrupt(config, runtime, tmp_path / f"started-{attempt}", kind)
    assert elapsed < PROMPT_S, elapsed
    _assert_cancelled(result)


def test_ctrl_c_during_a_final_sleep_reports_the_run_cancelled(config: Path, runtime: Runtime, tmp_path: Path) -> None:
    result, _, elapsed = _interrupt(config, runtime, tmp_path / "started", "final sleep")
    assert elapsed < PROMPT_S, elapsed
    _assert_cancelled(result)


def test_a_second_ctrl_c_may_end_the_process_at_once_but_never_crashes_it(
    config: Path, runtime: Runtime, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    process = _start(config, CODES["sleeping loop"].format(marker=str(marker)), runtime)
    _wait_for(marker, process)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=PROMPT_S * 4)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"two Ctrl-C did not stop `wasmexec run`: {process.communicate()}")
    assert process.returncode in (130, -signal.SIGINT), (process.returncode, stderr)
    assert "Traceback" not in stderr, stderr
