"""The server's own path stays short: a regression guard that counts work instead of timing it.

A trivial `run_python` call without a session is measured by what it makes the process do:
threads started, hops to anyio worker threads, task groups opened, arguments run through the JSON Schema
validator, audit lines, files written under the state directory (sessions and artifacts: none), artifact
owners recorded, serialisations of the input schema, and whether the work a run orders as it ends waits
for its answer (`spares.Hold`). Each thread start or hop costs a GIL hand-off on a busy machine (0.1–0.5 ms
each on the 2-core CI machine), and each turn of the event loop a pass through its selector, which
wall-clock tests could never pin down.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest
from mcp import Client

from wasmexec import Limits, Runtime
from wasmexec._audit import AuditLog
from wasmexec._sandbox import spares
from wasmexec._sandbox.sandbox import Sandbox
from wasmexec._server.server import RunPythonServer, ServeOptions
from wasmexec._state.directory import StateDir
from wasmexec._state.key import StateKey
from wasmexec._state.shared_artifacts import SharedArtifactStore

WARM_UP_CALLS = 3
COUNTED_CALLS = 10


class _Counts:
    def __init__(self) -> None:
        self.threads: Counter[tuple[str, str]] = Counter()
        """Threads started while counting, as (name of the thread that started it, name)."""
        self.hops: Counter[str] = Counter()
        self.owners = 0
        """Owners recorded in the shared artifact store (a stat and maybe a write in the state dir each)."""
        self.schema_dumps = 0
        self.validations = 0
        self.task_groups = 0
        """Task groups the server opened (one made and cancelled per call cost the loop two more turns)."""
        """Arguments checked by the JSON Schema validator (a code-only call needs none: `_code_only_check`)."""
        self.order: list[str] = []
        """"answer" as each result is built, "release" as a run's `spares.Hold` is released."""
        self.held_closes: list[bool] = []
        """Whether each used Store queued to be closed came with its run's hold."""
        """Times the tool's input schema was serialised (once per call was the validator cache's key)."""
        self.counting = False


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Counts]:
    counts = _Counts()
    start, run_sync, task_group = threading.Thread.start, anyio.to_thread.run_sync, anyio.create_task_group

    def counted_start(thread: threading.Thread) -> None:
        if counts.counting:
            counts.threads[threading.current_thread().name, thread.name] += 1
        start(thread)

    async def counted_run_sync(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if counts.counting:
            counts.hops[getattr(function, "__qualname__", repr(function))] += 1
        return await run_sync(function, *args, **kwargs)

    def counted_task_group() -> anyio.abc.TaskGroup:
        if counts.counting and "/wasmexec/" in sys._getframe(1).f_code.co_filename:
            counts.task_groups += 1
        return task_group()

    # A slow machine must not make a trivial run look long enough to retire its thread (tested on its own).
    monkeypatch.setattr("wasmexec._sandbox.stack.RETIRE_AFTER_S", 60.0)
    monkeypatch.setattr(threading.Thread, "start", counted_start)
    monkeypatch.setattr(anyio.to_thread, "run_sync", counted_run_sync)
    monkeypatch.setattr(anyio, "create_task_group", counted_task_group)
    yield counts


def _files(root: Path) -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in root.rglob("*")}


def test_a_trivial_call_without_a_session_starts_one_thread_hops_nowhere_and_writes_one_audit_line(
    runtime: Runtime, tmp_path: Path, counts: _Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Wired as `wasmexec serve` wires it: a state directory with sessions, artifacts shared through it.
    state = StateDir(tmp_path / "state", StateKey.kept_in(tmp_path / "state"))
    artifacts = SharedArtifactStore(state.artifacts, state.key)
    audit = AuditLog(tmp_path / "audit.jsonl")
    sandbox = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, audit=audit, artifact_store=artifacts)
    sandbox.prepare()
    options = ServeOptions(limits=Limits(timeout_ms=10_000), sessions_dir=state.sessions, state=state)
    server = RunPythonServer(sandbox, options)
    set_owner, dumps, argument_errors = SharedArtifactStore.set_owner, json.dumps, server._argument_errors

    def counted_set_owner(store: SharedArtifactStore, run_id: str, caller: str | None) -> None:
        counts.owners += counts.counting
        set_owner(store, run_id, caller)

    def counted_dumps(value: Any, *args: Any, **kwargs: Any) -> str:
        counts.schema_dumps += counts.counting and value is server.input_schema
        return dumps(value, *args, **kwargs)

    def counted_argument_errors(arguments: dict[str, Any]) -> list[dict[str, str]]:
        counts.validations += counts.counting
        return argument_errors(arguments)

    later, release, tool_result = spares._background.later, spares.Hold.release, server._tool_result

    def recorded_later(close: Callable[[], None], hold: spares.Hold | None = None) -> bool:
        if counts.counting:
            counts.held_closes.append(hold is not None)
        return later(close, hold)

    def recorded_release(hold: spares.Hold) -> None:
        if counts.counting:
            counts.order.append("release")
        release(hold)

    def recorded_tool_result(*args: Any) -> Any:
        answer = tool_result(*args)
        if counts.counting:
            counts.order.append("answer")
        return answer

    monkeypatch.setattr(spares._background, "later", recorded_later)
    monkeypatch.setattr(spares.Hold, "release", recorded_release)
    monkeypatch.setattr(server, "_tool_result", recorded_tool_result)
    monkeypatch.setattr(SharedArtifactStore, "set_owner", counted_set_owner)
    monkeypatch.setattr(json, "dumps", counted_dumps)
    monkeypatch.setattr(server, "_argument_errors", counted_argument_errors)

    async def main() -> list[Any]:
        results = []
        with anyio.fail_after(60):
            async with Client(server.lowlevel()) as client:
                for _ in range(WARM_UP_CALLS):
                    await client.call_tool("run_python", {"code": "result = 1 + 1"})
                before = _files(tmp_path / "state")
                counts.counting = True
                for _ in range(COUNTED_CALLS):
                    results.append(await client.call_tool("run_python", {"code": "result = 1 + 1"}))
                counts.counting = False
                assert _files(tmp_path / "state") == before  # no session: nothing of the state dir is touched
        return results

    try:
        results = anyio.run(main)
    finally:
        server.close()
        sandbox.close()
        artifacts.close()
    assert all(result.structured_content["result"]["data"] == 2 for result in results)
    # Runs go to reused threads with a guest-sized stack, so the guest runs on the run's thread (no second
    # thread per run) and a call seldom waits for a thread to start (only when every run thread is busy).
    # (Spares are made on their own thread, off the request's path: not counted here.)
    on_the_path = Counter({key: n for key, n in counts.threads.items() if key[0] != "wasmexec-spares"})
    assert set(on_the_path) <= {("MainThread", "wasmexec-run")}, counts.threads
    assert on_the_path.total() <= 2, counts.threads
    # The event loop waits for the run without parking a worker thread, and builds the result itself.
    assert counts.hops == Counter(), counts.hops
    # A run that asks its client nothing is awaited without a task group for questions (none opened at all).
    assert counts.task_groups == 0
    # No artifacts: no owner to record (a stat of the state dir on the event loop per call).
    assert counts.owners == 0
    # What a run orders as it ends (its Store's close, its workspace's removal, its spare) waits for its answer:
    # held until the result is built (and, over a stdio pipe, written: test_stdio.py); the hold itself is tested
    # in test_spares.py.
    assert counts.held_closes == [True, True] * COUNTED_CALLS
    assert counts.order == ["answer", "release"] * COUNTED_CALLS
    # Arguments of only `code` are checked without the validator (the same answer: test_run_python_schema.py);
    # others by a validator made once (tested in test_server.py), never re-serialising the schema.
    assert counts.validations == 0
    assert counts.schema_dumps == 0
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert len(lines) == WARM_UP_CALLS + COUNTED_CALLS  # every run still writes its audit line, one each


def test_the_output_schema_that_clients_check_every_result_against_has_no_refs(runtime: Runtime) -> None:
    server = RunPythonServer(Sandbox(Limits(timeout_ms=10_000), runtime=runtime))
    try:
        schema = server.tool.output_schema
        assert schema is not None and "$ref" not in json.dumps(schema) and "$defs" not in schema
        assert set(schema["required"]) >= {"run_id", "result", "logs", "diagnostics"}
    finally:
        server.close()
