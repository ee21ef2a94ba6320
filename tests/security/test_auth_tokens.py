"""`serve --http --auth-token-file`: without a valid token nothing is served; principals cannot reach each other.

Real `wasmexec serve --http` processes, real MCP clients sending ``Authorization: Bearer``, a
real downstream server (tests/servers/awkward.py: `delete_item` needs approval) and the real
audit log. Principal B holds A's handles (an artifact URI, a session id, an MCP session id, a
paused run's request_state), as if they had leaked, and tries each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import MCPError
from mcp.types import ElicitResult, InputRequiredResult

from tests.authserver import MCP_HEADERS, authed_client, new_token, post_initialize, serving, write_token_file
from tests.helpers import data_of, free_port
from tests.integration.conftest import SERVERS
from wasmexec import Runtime
from wasmexec._server.resources import artifact_uri

ALICE, BOB = new_token(), new_token()
DELETE = "import servers.awkward as a\nresult = await a.delete_item(item_id='x1')"
APPROVE = {"approval": ElicitResult(action="accept", content={"approve": True})}


@pytest.fixture(scope="module")
def built() -> None:
    """The serve processes load the default image from the shared cache: make sure it is there."""
    Runtime().build()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, built: None) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("auth")
    config = {"mcpServers": {"awkward": {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]}}}
    (tmp / "mcp.json").write_text(json.dumps(config))
    return {"tokens": write_token_file(tmp / "tokens", {"alice": ALICE, "bob": BOB}), "config": tmp / "mcp.json",
            "audit": tmp / "audit.jsonl"}  # fmt: skip


@pytest.fixture(scope="module")
def url(setup: dict[str, Path]) -> Iterator[str]:
    with serving("--auth-token-file", str(setup["tokens"]), "--config", str(setup["config"]),
                 "--audit-log", str(setup["audit"]), "--timeout-ms", "30000") as served:  # fmt: skip
        yield served


def _run(body: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            return await body()

    return anyio.run(main)


def test_a_request_without_a_token_gets_401_and_a_bearer_challenge_without_an_error(url: str) -> None:
    response = post_initialize(url)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and "error=" not in challenge
    assert httpx2.get(url, headers=MCP_HEADERS, trust_env=False).status_code == 401  # the GET stream too


@pytest.mark.parametrize(
    "authorization",
    [f"Bearer {new_token()}", f"Bearer {ALICE[:-1]}", f"Bearer {ALICE}x", f"Bearer {ALICE.upper()}",
     f"Basic {ALICE}", f"Bearer alice {ALICE}", "Bearer"],
    ids=["unknown", "prefix", "longer", "other-case", "basic", "name-and-token", "empty"],
)  # fmt: skip
def test_a_wrong_token_gets_401(url: str, authorization: str) -> None:
    response = post_initialize(url, authorization=authorization)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")
    assert ALICE not in response.text and ALICE not in response.headers["www-authenticate"]


def test_health_and_metrics_need_no_token(url: str) -> None:
    base = url.removesuffix("/mcp")
    assert httpx2.get(base + "/healthz", trust_env=False).json()["status"] == "ok"
    assert "wasmexec_runs_total" in httpx2.get(base + "/metrics", trust_env=False).text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_another_principal_cannot_read_an_artifact_or_use_a_session(url: str, mode: str) -> None:
    async def body() -> tuple[Any, ...]:
        async with authed_client(url, ALICE, mode) as alice, authed_client(url, BOB, mode) as bob:
            made = await alice.call_tool("run_python", {"code": "open('/workspace/out.txt', 'w').write('for A')",
                                                        "session": True})  # fmt: skip
            result = made.structured_content
            assert result is not None
            uri, session_id = artifact_uri(result["run_id"], "out.txt"), result["session_id"]
            with pytest.raises(MCPError):
                await bob.read_resource(uri)
            listed = [str(r.uri) for r in (await bob.list_resources()).resources]
            try:
                stolen: Any = await bob.call_tool("run_python", {"code": "result = open('/workspace/out.txt').read()",
                                                                 "session_id": session_id})  # fmt: skip
            except MCPError as exc:
                stolen = exc
            mine = await alice.call_tool("run_python", {"code": "result = open('/workspace/out.txt').read()",
                                                        "session_id": session_id})  # fmt: skip
            read = await alice.read_resource(uri)
            return listed, stolen, mine, read, uri

    listed, stolen, mine, read, uri = _run(body)
    assert uri not in listed
    assert isinstance(stolen, MCPError) and "unknown or expired session_id" in str(stolen)
    assert data_of(mine.structured_content) == "for A"
    assert read.contents[0].text == "for A"


def test_another_principal_cannot_use_a_2025_mcp_session(url: str) -> None:
    opened = post_initialize(url, ALICE)
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    headers = {**MCP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}

    def post(token: str) -> httpx2.Response:
        return httpx2.post(url, json=request, headers={**headers, "authorization": f"Bearer {token}"},
                           timeout=60, trust_env=False)  # fmt: skip

    assert post(BOB).status_code == 404  # as if the session did not exist
    assert post(ALICE).status_code == 200


async def _accept(ctx: Any, params: Any) -> ElicitResult:
    return APPROVE["approval"]


def test_another_principal_cannot_resume_a_paused_approval(url: str, setup: dict[str, Path]) -> None:
    async def body() -> Any:
        async with authed_client(url, ALICE, elicitation_callback=_accept) as alice, \
                authed_client(url, BOB, elicitation_callback=_accept) as bob:  # fmt: skip
            paused = await alice.session.call_tool("run_python", {"code": DELETE}, allow_input_required=True)
            assert isinstance(paused, InputRequiredResult) and paused.request_state
            with pytest.raises(MCPError, match=r"(?i)request_?state"):
                await bob.call_tool("run_python", {"code": DELETE}, input_responses=APPROVE,
                                    request_state=paused.request_state)  # fmt: skip
            resumed = await alice.call_tool("run_python", {"code": DELETE}, input_responses=APPROVE,
                                            request_state=paused.request_state)  # fmt: skip
            return resumed.structured_content

    result = _run(body)
    assert result["approval_state"] == "APPROVED" and "delete_item" in str(data_of(result))
    lines = [json.loads(line) for line in setup["audit"].read_text().splitlines()]
    deletes = [line for line in lines if line.get("tool") == "delete_item" and line["run_id"] == result["run_id"]]
    assert [(line["outcome"], line["principal"]) for line in deletes] == [("ok", "alice")]  # ran once, for A


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_audit_lines_name_the_principal_and_never_hold_a_token(url: str, setup: dict[str, Path], mode: str) -> None:
    async def body() -> list[str]:
        ids = []
        for token in (ALICE, BOB):
            async with authed_client(url, token, mode) as client:
                done = await client.call_tool("run_python", {"code": "result = 1"})
                assert done.structured_content is not None
                ids.append(done.structured_content["run_id"])
        return ids

    alice_run, bob_run = _run(body)
    text = setup["audit"].read_text()
    runs = {line["run_id"]: line for line in map(json.loads, text.splitlines()) if line["kind"] == "run"}
    assert runs[alice_run]["principal"] == "alice" and runs[bob_run]["principal"] == "bob"
    assert ALICE not in text and BOB not in text


# The start-up checks: each refuses to serve with exit 2, a one-line reason and no traceback.


def _serve(*options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmexec", "serve", "--no-audit", *options],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and all(word in done.stderr for word in words), done.stderr


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_a_token_file_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    tokens = write_token_file(tmp_path / "tokens", {"alice": ALICE}, mode)
    _refused(_serve("--http", "--port", str(free_port()), "--auth-token-file", str(tokens)), "chmod 600")


@pytest.mark.parametrize(
    ("text", "words"),
    [(f"alice {ALICE}\nbob {ALICE}\n", ("line 2", "same token as line 1")),
     (f"alice {ALICE} extra\n", ("line 1", "two fields")),
     (f"{ALICE}\n", ("line 1", "two fields")),
     ("alice short-token\n", ("line 1", "shorter than 32")),
     (f"al ice {ALICE}\n", ("line 1",)),
     (f"alice tok,{ALICE}\n", ("line 1", "characters")),
     ("# only a comment\n\n", ("no tokens",))],
    ids=["duplicate", "three-fields", "one-field", "short", "spaced-name", "bad-characters", "empty"],
)  # fmt: skip
def test_a_malformed_token_file_is_refused_naming_the_line_never_the_token(
    tmp_path: Path, text: str, words: tuple[str, ...]
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(text)
    tokens.chmod(0o600)
    done = _serve("--http", "--port", str(free_port()), "--auth-token-file", str(tokens))
    _refused(done, str(tokens), *words)
    assert ALICE not in done.stderr


def test_a_non_loopback_host_without_authentication_is_refused_saying_how_to_fix_it() -> None:
    done = _serve("--http", "--host", "0.0.0.0", "--port", str(free_port()))
    _refused(done, "--auth-token-file", "--auth-issuer", "--allow-unauthenticated")


def test_allow_unauthenticated_serves_beyond_loopback_and_says_so(built: None) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "wasmexec", "serve", "--no-audit", "--http", "--host", "0.0.0.0",
                                "--port", str(port), "--allow-unauthenticated"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:
            lines.append(line)
            if "serving run_python" in line:
                break
        assert any("without authentication" in line for line in lines), lines
        assert post_initialize(f"http://127.0.0.1:{port}/mcp").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
        process.stderr.close()


@pytest.mark.parametrize(
    "options",
    [("--auth-token-file", "x"), ("--allow-unauthenticated",), ("--http", "--auth-issuer", "https://idp.example"),
     ("--http", "--auth-audience", "https://mcp.example/mcp"),
     ("--http", "--allow-unauthenticated", "--auth-token-file", "x")],
    ids=["stdio-token-file", "stdio-allow", "issuer-alone", "audience-alone", "allow-and-auth"],
)  # fmt: skip
def test_authentication_options_that_do_not_fit_are_usage_errors(options: tuple[str, ...]) -> None:
    _refused(_serve(*options))
