"""Servers configured with `"type": "sse"` (the legacy HTTP+SSE transport) are reached, with every event bounded."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import data_of, error_of, free_port, listening
from tests.integration.conftest import SERVERS
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config
from wasmexec._tools.transports import MAX_MESSAGE_BYTES


@pytest.fixture(scope="module")
def sse_url() -> Iterator[str]:
    port = free_port()
    with listening([sys.executable, str(SERVERS / "sse_only.py"), str(port)], port) as url:
        yield url.removesuffix("/mcp") + "/sse"


def test_an_sse_server_is_called_and_an_oversized_event_ends_only_that_connection(
    sse_url: str, runtime: Runtime, tmp_path: Path
) -> None:
    config = parse_config({"mcpServers": {"legacy": {"type": "sse", "url": sse_url}}})
    assert config.servers["legacy"].transport == "sse"
    with (tmp_path / "servers.log").open("w") as errlog, Broker(config, errlog=errlog, warn=lambda _: None) as broker:
        sandbox = Sandbox(Limits(timeout_ms=30_000), runtime=runtime, tools=broker, redactor=broker.redactor)
        assert data_of(sandbox.run_sync("import servers.legacy as s\nawait s.add(a=2, b=3)")) == {"result": 5}
        flood = sandbox.run_sync(f"import servers.legacy as s\nawait s.flood(size={MAX_MESSAGE_BYTES + 1000})")
        assert error_of(flood)["type"] in ("ToolCallError", "SandboxLimitError"), json.dumps(flood)[:2000]
        again = sandbox.run_sync("import servers.legacy as s\nawait s.add(a=1, b=1)")  # a new connection
        assert data_of(again) == {"result": 2}
