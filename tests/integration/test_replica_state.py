"""Two `wasmexec serve --http` replicas on one --state-dir and --state-key-file, talked to by real MCP clients.

Sessions, PII vaults and artifacts live sealed on the shared directory, not in a process:
what one replica made, the other serves (and after the first is stopped, or killed mid-run);
one session still runs one call at a time; caps and expiry count the directory; owners are
checked on every replica; a sealed file changed on disk is refused with a clear error; and
nothing of a session's files, its PII or its artifacts is in clear text on the directory.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import ResourceLink

from tests.helpers import data_of, start_serve_http, wait_for_health
from tests.integration.conftest import SERVERS
from wasmexec import Runtime

EMAIL = "planted.person@example.com"
SECRET = "the-contents-of-a-private-file-4711"
CLOSED_TIMEOUT_S = 60


class Replica:
    """One `wasmexec serve --http` process."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, stderr: Path) -> None:
        self.process, self.url, self.stderr = process, url, stderr

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=20)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("replicas")
    key = root / "state.key"
    key.write_text("ab" * 32 + "\n")
    key.chmod(0o600)
    config = root / "mcp.json"
    awkward = {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]}
    config.write_text(json.dumps({"mcpServers": {"awkward-names": awkward}}))
    (root / "tmp").mkdir()
    return {"root": root, "key": key, "config": config}


@contextmanager
def replica(runtime: Runtime, state: Path, shared: dict[str, Path], *options: str) -> Iterator[Replica]:
    """A replica on `state`, stopped (SIGTERM) at the end unless the test killed it."""
    options = ["--no-audit", "--timeout-ms", "30000", "--state-dir", str(state), "--state-key-file",
               str(shared["key"]), "--config", str(shared["config"]), "--pii", "tokenize", *options]  # fmt: skip
    env = {**os.environ, "WASMEXEC_CACHE_DIR": str(runtime.artifacts.directory), "TMPDIR": str(shared["root"] / "tmp")}
    stderr = state.parent / f"replica-{secrets.token_hex(4)}.err"
    process, port = start_serve_http(options, env, stderr)
    try:
        wait_for_health(port, process, stderr)
        yield Replica(process, f"http://127.0.0.1:{port}/mcp", stderr)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def pair(runtime: Runtime, shared: dict[str, Path]) -> Iterator[tuple[Replica, Replica, Path]]:
    state = shared["root"] / "pair-state"
    with replica(runtime, state, shared) as a, replica(runtime, state, shared) as b:
        yield a, b, state


def _run(body: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(CLOSED_TIMEOUT_S):
            return await body()

    return anyio.run(main)


async def _call(url: str, code: str, mode: str = "auto", **arguments: Any) -> Any:
    async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
        return await client.call_tool("run_python", {"code": code, **arguments})


async def _refusal(url: str, code: str, **arguments: Any) -> MCPError:
    async with Client(url, mode="auto") as client:
        with pytest.raises(MCPError) as caught:  # inside the client: its task group would wrap the error
            await client.call_tool("run_python", {"code": code, **arguments})
        return caught.value


def _result(reply: Any) -> dict[str, Any]:
    assert not reply.is_error, reply
    return reply.structured_content  # type: ignore[no-any-return]


def _scratch(shared: dict[str, Path]) -> list[Path]:
    return sorted((shared["root"] / "tmp").glob("wasmexec-session-runs-*/run-*"))


# -- one store, any replica ------------------------------------------------------------------------


def test_a_session_written_on_one_replica_is_read_on_the_other_ten_times_of_ten(
    pair: tuple[Replica, Replica, Path],
) -> None:
    a, b, _ = pair

    async def body() -> list[Any]:
        seen = []
        for number in range(10):
            writer, reader = (a, b) if number % 2 == 0 else (b, a)
            made = _result(await _call(writer.url, f"open('n.txt', 'w').write('value {number}')", session=True))
            read = _result(await _call(reader.url, "result = open('n.txt').read()", session_id=made["session_id"]))
            seen.append(data_of(read))
        return seen

    assert _run(body) == [f"value {number}" for number in range(10)]


def test_one_sessions_calls_on_two_replicas_never_overlap_the_second_is_told_to_retry(
    pair: tuple[Replica, Replica, Path],
) -> None:
    a, b, _ = pair

    async def body() -> tuple[Any, Any, Any]:
        made = _result(await _call(a.url, "open('a.txt', 'w').write('x')", session=True))
        running = anyio.Event()
        replies: list[Any] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            running.set()  # "running": replica A holds the session's lock

        async def slow() -> None:
            async with Client(a.url, mode="auto") as client:
                arguments = {"code": "import time\ntime.sleep(3)\nresult = 'slow'", "session_id": made["session_id"]}
                replies.append(await client.call_tool("run_python", arguments, progress_callback=on_progress))

        async with anyio.create_task_group() as group:
            group.start_soon(slow)
            await running.wait()
            busy = await _call(b.url, "result = 'fast'", session_id=made["session_id"])
        after = _result(await _call(b.url, "result = 'after'", session_id=made["session_id"]))
        return busy, replies[0], after

    busy, slow, after = _run(body)
    assert busy.is_error and "busy" in busy.content[0].text and "retry" in busy.content[0].text
    assert data_of(_result(slow)) == "slow" and data_of(after) == "after"


def test_an_artifact_made_on_one_replica_is_read_on_the_other(pair: tuple[Replica, Replica, Path]) -> None:
    a, b, _ = pair

    async def body() -> tuple[str, Any]:
        reply = await _call(a.url, "open('report.csv', 'w').write('city,total\\nOslo,3\\n')")
        uri = next(str(block.uri) for block in reply.content if isinstance(block, ResourceLink))
        async with Client(b.url, mode="auto") as client:
            return uri, await client.read_resource(uri)

    uri, read = _run(body)
    assert uri.startswith("wasmexec://runs/") and read.contents[0].text == "city,total\nOslo,3\n"


def test_a_pii_token_minted_on_one_replica_resolves_on_the_other(pair: tuple[Replica, Replica, Path]) -> None:
    a, b, _ = pair
    echo = "import json\nimport servers.awkward_names as aw\nresult = json.loads(await aw.echo_args(to={to}))['to']"

    async def body() -> tuple[str, Any, Any]:
        first = _result(await _call(a.url, echo.format(to=repr(EMAIL)), session=True))
        token = data_of(first)
        again = _result(await _call(b.url, echo.format(to=repr(token)), session_id=first["session_id"]))
        outside = _result(await _call(b.url, echo.format(to=repr(token))))  # not in the session: not its token
        return token, again, outside

    token, again, outside = _run(body)
    assert token.startswith("<EMAIL_1_") and data_of(again) == token  # B restored it, the tool echoed the address
    assert not outside["result"]["ok"] and token in outside["result"]["error"]["message"]


def test_another_client_cannot_use_a_sessions_id_or_artifacts_on_either_replica(
    pair: tuple[Replica, Replica, Path],
) -> None:
    a, b, _ = pair

    async def body() -> tuple[list[Any], list[Any], Any]:
        async with Client(a.url, mode="legacy") as owner:
            made = _result(await owner.call_tool("run_python", {"code": f"open('mine.txt', 'w').write({SECRET!r})",
                                                                "session": True}))  # fmt: skip
            uri = f"wasmexec://runs/{made['run_id']}/mine.txt"
            refusals, listings = [], []
            for url, mode in ((a.url, "legacy"), (b.url, "legacy"), (b.url, "auto")):
                async with Client(url, mode=mode) as other:  # type: ignore[arg-type]
                    for attempt in (
                        other.call_tool(
                            "run_python", {"code": "open('mine.txt').read()", "session_id": made["session_id"]}
                        ),
                        other.read_resource(uri),
                    ):
                        with pytest.raises(MCPError) as caught:
                            await attempt
                        refusals.append(caught.value)
                    listings.append((await other.list_resources()).resources)
            mine = await owner.read_resource(uri)
        return refusals, listings, mine

    refusals, listings, mine = _run(body)
    assert [r.code for r in refusals] == [-32602] * 6
    assert all("unknown or expired session_id" in r.message for r in refusals[::2])
    assert all("Resource not found" in r.message for r in refusals[1::2])
    assert listings == [[], [], []] and mine.contents[0].text == SECRET


# -- the directory, not a process ------------------------------------------------------------------


def test_a_session_outlives_its_replica_stopped_and_killed_mid_run(
    runtime: Runtime, shared: dict[str, Path], tmp_path: Path
) -> None:
    state = tmp_path / "state"

    async def write(url: str) -> str:
        made = _result(await _call(url, "open('notes.txt', 'w').write('committed')", session=True))
        return str(made["session_id"])

    async def read(url: str, session_id: str) -> Any:
        return data_of(_result(await _call(url, "result = open('notes.txt').read()", session_id=session_id)))

    async def start_and_kill(victim: Replica, session_id: str) -> None:
        code = "open('notes.txt', 'w').write('never committed')\nimport time\ntime.sleep(60)"
        async with anyio.create_task_group() as group:

            async def doomed() -> None:
                with pytest.raises(Exception):  # noqa: B017 - the connection dies with the replica
                    await _call(victim.url, code, session_id=session_id)

            group.start_soon(doomed)
            while not any((copy / "notes.txt").is_file() and (copy / "notes.txt").read_text() == "never committed"
                          for copy in _scratch(shared)):  # fmt: skip
                await anyio.sleep(0.05)  # polled: the guest has written its private copy and is sleeping
            victim.kill()

    with replica(runtime, state, shared) as b:
        with replica(runtime, state, shared) as a:
            session_id = _run(lambda: write(a.url))
        assert _run(lambda: read(b.url, session_id)) == "committed"  # A stopped: B serves the session
        with replica(runtime, state, shared) as a:
            _run(lambda: start_and_kill(a, session_id))
        assert _scratch(shared)  # the dead replica's copy is still there ...
        assert _run(lambda: read(b.url, session_id)) == "committed"  # ... the lock died with it
        with replica(runtime, state, shared):
            assert not _scratch(shared)  # ... and the next replica to start removes it


def test_max_sessions_counts_every_replicas_sessions(runtime: Runtime, shared: dict[str, Path], tmp_path: Path) -> None:
    state = tmp_path / "state"
    with replica(runtime, state, shared, "--max-sessions", "2") as a, replica(runtime, state, shared,
                                                                              "--max-sessions", "2") as b:  # fmt: skip

        async def body() -> list[Any]:
            _result(await _call(a.url, "1", session=True))
            _result(await _call(b.url, "1", session=True))
            return [await _call(url, "1", session=True) for url in (a.url, b.url)]

        refused = _run(body)
    assert all(r.is_error and "already holds 2 sessions" in r.content[0].text for r in refused)


def test_expiry_is_shared_and_never_removes_a_session_in_use_on_another_replica(
    runtime: Runtime, shared: dict[str, Path], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with replica(runtime, state, shared, "--session-ttl", "1") as a, replica(runtime, state, shared,
                                                                             "--session-ttl", "1") as b:  # fmt: skip

        async def body() -> tuple[Any, Any, MCPError]:
            made = _result(await _call(a.url, "open('a.txt', 'w').write('kept')", session=True))
            session_id = made["session_id"]
            # In use on A for 3 s, three TTLs: B's reaper runs meanwhile and must not remove it.
            long = _result(await _call(a.url, "import time\ntime.sleep(3)\nresult = open('a.txt').read()",
                                       session_id=session_id))  # fmt: skip
            right_after = _result(await _call(b.url, "result = open('a.txt').read()", session_id=session_id))
            while (state / "sessions" / session_id).exists():  # then unused: some replica removes it
                await anyio.sleep(0.1)
            return long, right_after, await _refusal(b.url, "1", session_id=session_id)

        long, right_after, expired = _run(body)
    assert data_of(long) == data_of(right_after) == "kept"
    assert expired.code == -32602 and "unknown or expired session_id" in expired.message


# -- sealed at rest --------------------------------------------------------------------------------


def test_nothing_sensitive_is_in_clear_text_on_the_state_directory(pair: tuple[Replica, Replica, Path]) -> None:
    a, b, state = pair
    echo = "import json\nimport servers.awkward_names as aw\nseen = json.loads(await aw.echo_args(to={to!r}))['to']"
    code = (echo.format(to=EMAIL) + f"\nopen('private.txt', 'w').write({SECRET!r} + ' ' + {EMAIL!r})"
            f"\nopen('{EMAIL}.csv', 'w').write({SECRET!r})\nresult = seen")  # fmt: skip

    async def body() -> Any:
        made = _result(await _call(a.url, code, session=True))
        return _result(await _call(b.url, "result = sorted(__import__('os').listdir('.'))",
                                   session_id=made["session_id"]))  # fmt: skip

    listed = data_of(_run(body))
    assert "private.txt" in listed and f"{EMAIL}.csv" in listed  # the session kept them, and an artifact too
    needles = [EMAIL.encode(), SECRET.encode(), EMAIL.encode("utf-16-le"), b"planted.person"]
    files = [path for path in state.rglob("*") if path.is_file()]
    assert {"sessions", "artifacts"} <= {path.relative_to(state).parts[0] for path in files}
    for path in files:
        content = path.read_bytes()
        assert not any(needle in content for needle in needles), path
        assert not any(needle.decode("utf-8", "replace") in str(path) for needle in needles[:2]), path


def test_sealed_files_changed_on_disk_are_refused_clearly_and_the_server_goes_on(
    pair: tuple[Replica, Replica, Path],
) -> None:
    a, b, state = pair

    def flip(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))

    async def body() -> tuple[Any, Any, Any, MCPError, Any]:
        made = _result(await _call(a.url, "open('a.txt', 'w').write('x')\nopen('b.txt', 'w').write('y')",
                                   session=True))  # fmt: skip
        session = state / "sessions" / made["session_id"]
        flip(next(session.glob("gen-*")))
        files = await _call(b.url, "1", session_id=made["session_id"])
        other = _result(await _call(a.url, "open('v.txt', 'w').write('1')", session=True))
        flip(state / "sessions" / other["session_id"] / "owner")
        owner = await _call(a.url, "1", session_id=other["session_id"])
        for sealed in (state / "artifacts" / made["run_id"]).glob("[0-9a-f]" * 64):  # a.txt's and b.txt's
            flip(sealed)
        async with Client(b.url, mode="auto") as client:
            with pytest.raises(MCPError) as caught:
                await client.read_resource(f"wasmexec://runs/{made['run_id']}/a.txt")
        echo = "import json\nimport servers.awkward_names as aw\nresult = json.loads(await aw.echo_args(to={to!r}))"
        tokens = _result(await _call(a.url, echo.format(to=EMAIL), session=True))
        flip(state / "sessions" / tokens["session_id"] / "vault")
        vault = await _call(b.url, "1", session_id=tokens["session_id"])
        alive = _result(await _call(b.url, "result = 6 * 7"))
        return files, owner, vault, caught.value, alive

    files, owner, vault, artifact, alive = _run(body)
    for refused, what in ((files, "files"), (owner, "owner"), (vault, "vault")):
        text = refused.content[0].text
        assert refused.is_error and f"stored {what} cannot be opened: changed on disk" in text, text
    assert artifact.code == -32602 and "Resource not found" in artifact.message
    assert data_of(alive) == 42


# -- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("short-key", "holds 5 bytes; at least 32 are needed"),
        ("open-key", "readable or writable by others"),
        ("missing-key", "cannot read state key file"),
        ("file-as-dir", "error: state directory"),
    ],
)
def test_a_bad_state_key_file_or_directory_is_a_clear_error_and_exit_2(
    tmp_path: Path, setup: str, message: str
) -> None:
    key, state = tmp_path / "key", tmp_path / "state"
    key.write_text("ab" * 32)
    key.chmod(0o600)
    if setup == "short-key":
        key.write_text("short")
    elif setup == "open-key":
        key.chmod(0o644)
    elif setup == "missing-key":
        key.unlink()
    else:
        state.write_text("a file")
    command = [sys.executable, "-m", "wasmexec", "serve", "--no-audit", "--state-dir", str(state),
               "--state-key-file", str(key)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_without_a_key_file_the_state_directory_keeps_a_private_key_of_its_own(
    runtime: Runtime, shared: dict[str, Path], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    command = [sys.executable, "-m", "wasmexec", "serve", "--no-audit", "--state-dir", str(state)]
    env = {**os.environ, "WASMEXEC_CACHE_DIR": str(runtime.artifacts.directory)}
    subprocess.run(command, capture_output=True, timeout=60, stdin=subprocess.DEVNULL, env=env, check=True)
    key = state / "state.key"
    assert oct(key.stat().st_mode & 0o777) == "0o600" and len(key.read_text().strip()) == 64


def test_a_default_state_dir_an_older_version_left_group_writable_is_made_private(
    runtime: Runtime, tmp_path: Path
) -> None:
    default = tmp_path / "xdg" / "wasmexec"
    default.mkdir(parents=True)
    default.chmod(0o775)  # what mkdir made of it under umask 002
    command = [sys.executable, "-m", "wasmexec", "serve", "--no-audit"]
    env = {
        **os.environ,
        "WASMEXEC_CACHE_DIR": str(runtime.artifacts.directory),
        "XDG_STATE_HOME": str(tmp_path / "xdg"),
    }
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
                          check=True)  # fmt: skip
    assert "sessions are off" not in done.stderr
    assert oct(default.stat().st_mode & 0o777) == "0o700" and (default / "sessions").is_dir()
