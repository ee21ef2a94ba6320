"""OAuth against a local authorization server: sign in once with `config login`, then runs use the stored token.

The server (tests/servers/oauth_protected.py) is an MCP server and its own authorization server,
built with the SDK's `mcp.server.auth`; its /authorize approves at once, so "the browser" is an
HTTP GET that follows the redirect to wasmexec's loopback listener.
"""

from __future__ import annotations

import json
import os
import queue
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.helpers import free_port, listening
from tests.integration.conftest import SERVERS
from wasmexec import Runtime


@pytest.fixture(scope="module")
def protected() -> Iterator[str]:
    port = free_port()
    with listening([sys.executable, str(SERVERS / "oauth_protected.py"), str(port)], port) as url:
        yield url


def _env(state: Path, runtime: Runtime | None = None) -> dict[str, str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "WASMEXEC_SCHEMA_CACHE": str(state / "schemas.json")}
    if runtime is not None:
        env["WASMEXEC_CACHE_DIR"] = str(runtime.artifacts.directory)
    return env


def _wasmexec(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmexec", *args], capture_output=True, text=True, timeout=120,
                          env=env, check=False)  # fmt: skip


def _sign_in(config: Path, state: Path) -> str:
    """Runs `config login`, opens the URL it prints like a browser would, and returns its stderr."""
    login = subprocess.Popen([sys.executable, "-m", "wasmexec", "config", "login", "secure", "--config", str(config)],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=_env(state))  # fmt: skip
    stderr = login.stderr
    assert stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True)
    reader.start()
    said = ""
    try:
        while "/authorize?" not in said:
            said += lines.get(timeout=60)
        url = next(word for word in said.split() if "/authorize?" in word)
        page = httpx2.get(url, follow_redirects=True, timeout=30)  # the authorization server redirects to us
        assert page.status_code == 200 and "Signed in" in page.text
        assert login.wait(timeout=60) == 0
    finally:
        login.kill()
        login.wait()
        reader.join(timeout=30)
        stderr.close()
    while not lines.empty():
        said += lines.get()
    return said


def test_sign_in_stores_a_private_token_that_runs_then_use_and_never_show(
    protected: str, tmp_path: Path, runtime: Runtime
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"secure": {"url": protected}}}))  # OAuth when it answers 401
    state = tmp_path / "state"
    said = _sign_in(config, state)
    assert "server 'secure' needs you to sign in" in said and "signed in to 'secure'" in said
    (token_file,) = (state / "wasmexec" / "oauth").iterdir()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    token = json.loads(token_file.read_text())["tokens"]["access_token"]

    code = "import servers.secure as s\nresult = {'me': await s.whoami(), 'echo': await s.echo_authorization()}"
    done = _wasmexec("run", "--config", str(config), "--no-audit", "-c", code, env=_env(state, runtime))
    result = json.loads(done.stdout)
    assert result["result"]["ok"], done.stderr
    assert result["result"]["data"]["me"]["scopes"] == ["mcp"]
    assert result["result"]["data"]["echo"] == {"result": "your token is [REDACTED]"}  # the server leaked it
    assert token not in done.stdout and "sign in" not in done.stderr  # the stored token, no prompt


def test_a_server_with_oauth_turned_off_says_it_was_refused(protected: str, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"secure": {"url": protected, "oauth": False}}}))
    done = _wasmexec("tools", "list", "--config", str(config), env=_env(tmp_path / "state"))
    assert done.returncode == 1 and "401 Unauthorized" in done.stderr and "needs you to sign in" not in done.stderr
    login = _wasmexec("config", "login", "secure", "--config", str(config), env=_env(tmp_path / "state"))
    assert login.returncode == 2 and "does not use OAuth" in login.stderr
