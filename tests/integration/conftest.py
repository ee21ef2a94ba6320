"""Real MCP servers for the tool tests: npm reference servers and small SDK servers in tests/servers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wasmexec import Limits, Runtime, Sandbox
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config

SERVERS = Path(__file__).resolve().parent.parent / "servers"
NODE_BIN = SERVERS / "node" / "node_modules" / ".bin"
SECRET = "s3cr3t-token-value-42"


def child_env(**extra: str) -> dict[str, str]:
    """The environment to hand a `wasmexec` child that an MCP client starts with a minimal environment:
    PATH and this session's WASMEXEC_* and XDG_* settings (so it, too, keeps out of the user's state)."""
    inherited = {key: value for key, value in os.environ.items() if key.startswith(("WASMEXEC_", "XDG_"))}
    return {**inherited, "PATH": os.environ["PATH"], **extra}


def _python(script: str, **extra: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(SERVERS / script)], **extra}


def server_config(tmp: Path) -> dict[str, object]:
    everything = NODE_BIN / "mcp-server-everything"
    if not everything.exists():
        pytest.fail("the npm test servers are missing: run scripts/install-test-servers.sh (CI does)")
    time_server = Path(sys.executable).parent / "mcp-server-time"
    return {"mcpServers": {
        "everything": {"command": str(everything), "args": ["stdio"]},
        "time": {"command": str(time_server), "args": ["--local-timezone", "UTC"]},
        "awkward-names": _python("awkward.py"),
        "slow": _python("slow.py"),
        "crashy": _python("crashy.py"),
        "hang": _python("hang.py"),
        "secrets": _python("secret_env.py", env={"API_TOKEN": SECRET}),
    }}  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("broker")
    errlog = (tmp / "servers.log").open("w")
    with Broker(parse_config(server_config(tmp)), cache_path=tmp / "schemas.json", errlog=errlog,
                warn=lambda message: None) as broker:  # fmt: skip
        yield broker
    errlog.close()


@pytest.fixture
def tool_sandbox(runtime: Runtime, broker: Broker) -> Sandbox:
    return Sandbox(Limits(timeout_ms=20_000), runtime=runtime, tools=broker, redactor=broker.redactor)
