"""Ctrl-C during `Sandbox.run_sync`: the run stops promptly and run_sync raises KeyboardInterrupt.

A real process gets a real SIGINT while the sandboxed code sleeps (the guest is blocked in a host
call) or spins (the guest is in wasm). A KeyboardInterrupt raised inside a wasmtime callback used
to crash the process, and a busy loop ignored Ctrl-C until its deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wasmexec import Runtime

#: The run's own deadline; stopping "promptly" means well under it.
RUN_TIMEOUT_S = 30
#: Generous for a loaded machine, far below RUN_TIMEOUT_S.
PROMPT_S = 10
INTERRUPTED_EXIT = 3
#: Lets the guest get from the marker (printed inside a host call) into its sleep or loop.
SETTLE_S = 0.5

CHILD = f"""
import sys
from wasmexec import AuditLog, Limits, Runtime, Sandbox
from wasmexec._runctx.toolhost import NoTools

class Marker(NoTools):
    def catalog(self, run, op, request):
        print("started", flush=True)  # the sandboxed code is running now
        return super().catalog(run, op, request)

sandbox = Sandbox(Limits(timeout_ms={RUN_TIMEOUT_S * 1000}), runtime=Runtime(sys.argv[1]), tools=Marker(),
                  audit=AuditLog(sys.argv[2]))
try:
    sandbox.run_sync(sys.argv[3])
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit({INTERRUPTED_EXIT})
print("returned", flush=True)
"""

START = "from codemode import discovery\ndiscovery.list_servers()\n"
CODES = {"sleeping": START + "import time\ntime.sleep(60)", "busy": START + "while True:\n    pass"}


@pytest.mark.parametrize("attempt", range(3))
@pytest.mark.parametrize("kind", sorted(CODES))
def test_sigint_stops_run_sync_promptly_with_keyboard_interrupt(
    runtime: Runtime, tmp_path: Path, kind: str, attempt: int
) -> None:
    audit = tmp_path / "audit.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(runtime.artifacts.directory), str(audit), CODES[kind]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(),
    )  # fmt: skip
    watchdog = threading.Timer(120, child.kill)  # a hung child fails the test instead of hanging it
    watchdog.start()
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"started\n", child.stderr.read() if child.stderr else b""
        time.sleep(SETTLE_S)
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=RUN_TIMEOUT_S * 2)
        elapsed = time.monotonic() - sent
    finally:
        watchdog.cancel()
        child.kill()
    assert child.returncode == INTERRUPTED_EXIT, (child.returncode, stderr.decode(errors="replace"))
    assert stdout == b"interrupted\n"
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
    assert elapsed < PROMPT_S
    (line,) = [json.loads(line) for line in audit.read_text().splitlines()]
    assert line["kind"] == "run" and line["outcome"] == "SandboxLimitError"
