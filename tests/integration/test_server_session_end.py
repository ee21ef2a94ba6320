"""A real client ends its `wasmexec serve` session: files, vault and slot go at once; ending is idempotent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from tests.helpers import data_of
from tests.integration.test_server_workspace import _call, _sessions_dir, _stdio
from wasmexec import Runtime


def _ended(result: dict[str, Any]) -> str:
    [note] = [d for d in result["diagnostics"] if d["code"] == "SESSION_ENDED"]
    return str(note["message"])


def test_ending_a_session_frees_its_slot_files_and_id_at_once(runtime: Runtime, tmp_path: Path) -> None:
    async def body(client: Client) -> Any:
        first, _ = await _call(client, "open('a.txt', 'w').write('kept')", session=True)
        directory = _sessions_dir(tmp_path) / first["session_id"]
        existed = directory.is_dir()
        ended, _ = await _call(client, "", session_id=first["session_id"], end_session=True)
        gone = not directory.exists()
        again, _ = await _call(client, "", session_id=first["session_id"], end_session=True)  # idempotent
        second, _ = await _call(client, "result = sorted(__import__('os').listdir('.'))", session=True)
        with pytest.raises(MCPError) as refused:  # the id is dead: running in it is refused as before
            await client.call_tool("run_python", {"code": "1", "session_id": first["session_id"]})
        return existed, ended, gone, again, second, refused.value

    existed, ended, gone, again, second, refused = _stdio(runtime, tmp_path, "auto", body, "--max-sessions", "1")
    assert existed and gone
    assert "has ended" in _ended(ended) and "session_id" not in ended and data_of(ended) is None
    assert "already ended" in _ended(again) and not again["tool_trace"]
    assert data_of(second) == [] and second["session_id"]  # --max-sessions 1: the slot was free at once
    assert refused.code == -32602 and "unknown or expired session_id" in refused.message


def test_end_session_runs_the_code_in_the_session_first(runtime: Runtime, tmp_path: Path) -> None:
    async def body(client: Client) -> Any:
        first, _ = await _call(client, "open('a.txt', 'w').write('kept')", session=True)
        last, _ = await _call(client, "result = open('a.txt').read()", session_id=first["session_id"],
                              end_session=True)  # fmt: skip
        retried, _ = await _call(client, "result = open('a.txt').read()", session_id=first["session_id"],
                                 end_session=True)  # fmt: skip
        return first, last, retried

    first, last, retried = _stdio(runtime, tmp_path, "auto", body, "--max-sessions", "1")
    assert data_of(last) == "kept" and "has ended" in _ended(last) and "session_id" not in last
    assert not (_sessions_dir(tmp_path) / first["session_id"]).exists()
    # A retry (its answer lost, say) finds nothing to end and runs nothing: the code needed the session's files.
    assert data_of(retried) is None and "no code ran" in _ended(retried)


def test_end_session_without_a_session_id_is_invalid_params(runtime: Runtime, tmp_path: Path) -> None:
    async def body(client: Client) -> MCPError:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("run_python", {"code": "", "end_session": True})
        return caught.value

    refused = _stdio(runtime, tmp_path, "auto", body)
    assert refused.code == -32602 and "'end_session' needs the 'session_id'" in refused.message
