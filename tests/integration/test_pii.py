"""PII tokenization end to end: a real server's result reaches the code as tokens, tokens go back as values.

The memory server stores what it is given in a JSONL file the test reads on the host:
that is where the real address must arrive, while the run's result, logs and trace
(everything returned to the model) show only the token.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import NODE_BIN, child_env

EMAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"

CODE = f"""
import servers.memory as memory
await memory.create_entities(entities=[{{"name": "Jane", "entityType": "person",
                                        "observations": ["mail {EMAIL}", "card {CARD}"]}}])
graph = await memory.read_graph()
seen = graph["entities"][0]["observations"]
print("seen", seen)
token = seen[0].split()[1]
await memory.create_entities(entities=[{{"name": "Copy", "entityType": "note", "observations": ["to " + token]}}])
try:
    await memory.create_entities(entities="not a list " + token)
except Exception as e:
    error = str(e) + str(getattr(e, "errors", ""))
result = {{"seen": seen, "token": token, "error": error}}
"""


def _run(tmp_path: Path, *options: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    store = tmp_path / "memory.jsonl"
    config = {"mcpServers": {"memory": {"command": str(NODE_BIN / "mcp-server-memory"),
                                        "env": {"MEMORY_FILE_PATH": str(store)}}}}  # fmt: skip
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    command = [sys.executable, "-m", "wasmexec", "run", "--config", str(tmp_path / "mcp.json"), "--no-audit"]
    done = subprocess.run([*command, *options, "-c", CODE], capture_output=True, text=True, timeout=180,
                          env=child_env(), check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    stored = [json.loads(line) for line in store.read_text().splitlines()]
    return json.loads(done.stdout), stored


def test_tokenize_hides_values_from_the_model_and_restores_them_for_tools(tmp_path: Path) -> None:
    result, stored = _run(tmp_path, "--pii", "tokenize")
    text = json.dumps(result)
    assert EMAIL not in text and "4111" not in text  # result, logs, trace, errors: nothing the model sees
    data = result["result"]["data"]  # type: ignore[index]
    tag = data["token"][-7:-1]
    assert data["seen"] == [f"mail <EMAIL_1_{tag}>", f"card <CARD_1_{tag}>"]
    copy = next(entity for entity in stored if entity.get("name") == "Copy")
    assert copy["observations"] == [f"to {EMAIL}"]  # the tool got the real address back


def test_redact_has_no_way_back(tmp_path: Path) -> None:
    result, stored = _run(tmp_path, "--pii", "redact")
    text = json.dumps(result)
    assert EMAIL not in text and "4111" not in text
    assert result["result"]["data"]["seen"] == ["mail <EMAIL>", "card <CARD>"]  # type: ignore[index]
    copy = next(entity for entity in stored if entity.get("name") == "Copy")
    assert copy["observations"] == ["to <EMAIL>"]


def test_off_by_default(tmp_path: Path) -> None:
    result, _ = _run(tmp_path)
    assert result["result"]["data"]["seen"] == [f"mail {EMAIL}", f"card {CARD}"]  # type: ignore[index]


@pytest.mark.parametrize("mode", ["tokenize"])
def test_the_policy_file_turns_it_on(tmp_path: Path, mode: str) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"pii": mode}))
    result, _ = _run(tmp_path, "--policy", str(policy))
    seen = result["result"]["data"]["seen"]  # type: ignore[index]
    assert seen[0].startswith("mail <EMAIL_1_") and seen[1].startswith("card <CARD_1_"), seen


def test_a_bad_mode_in_the_policy_is_a_clear_error(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"pii": "hide"}))
    done = subprocess.run([sys.executable, "-m", "wasmexec", "run", "--policy", str(policy), "-c", "1"],
                          capture_output=True, text=True, timeout=120, env=child_env(), check=False)  # fmt: skip
    assert done.returncode != 0
    assert "pii must be one of off, tokenize, redact" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_session_keeps_its_tokens_from_one_call_to_the_next(tmp_path: Path) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    store = tmp_path / "memory.jsonl"
    config = {"mcpServers": {"memory": {"command": str(NODE_BIN / "mcp-server-memory"),
                                        "env": {"MEMORY_FILE_PATH": str(store)}}}}  # fmt: skip
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--config", str(tmp_path / "mcp.json"), "--no-audit", "--pii", "tokenize"],
        env=child_env(XDG_STATE_HOME=str(tmp_path / "state")),
    )
    first = f"""
import servers.memory as memory
await memory.create_entities(entities=[{{"name": "Jane", "entityType": "person", "observations": ["{EMAIL}"]}}])
result = (await memory.read_graph())["entities"][0]["observations"][0]
"""

    async def main() -> tuple[object, object, object]:
        with anyio.fail_after(180):
            async with Client(params, mode="auto") as client:
                one = (await client.call_tool("run_python", {"code": first, "session": True})).structured_content
                assert one is not None and one["result"]["ok"], one
                token = one["result"]["data"]
                send = (
                    "import servers.memory as m\nawait m.create_entities(entities=[{{'name': {!r}, "
                    "'entityType': 'note', 'observations': [{!r}]}}])\nresult = 'sent'"
                )
                two = await client.call_tool("run_python", {"code": send.format("Copy", token),
                                                            "session_id": one["session_id"]})  # fmt: skip
                other = await client.call_tool("run_python", {"code": send.format("Other", token)})  # not its token
                return one, two.structured_content, other.structured_content

    one, two, other = anyio.run(main)
    token = one["result"]["data"]  # type: ignore[index]
    assert token.startswith("<EMAIL_1_")
    assert two["result"]["ok"], two  # type: ignore[index]
    # A run outside the session does not know the token: the call is refused, naming it, never sent as text.
    assert not other["result"]["ok"] and token in other["result"]["error"]["message"], other  # type: ignore[index]
    notes = {e["name"]: e["observations"] for e in map(json.loads, store.read_text().splitlines()) if "name" in e}
    assert notes["Copy"] == [EMAIL]  # the session's second run restored the first run's token
    assert "Other" not in notes


ECHO = """
import json
import servers.awkward_names as aw
result = json.loads(await aw.echo_args(to={to}))["to"]
"""


def test_a_sessions_tokens_keep_their_meaning_while_it_is_used_and_die_with_it(tmp_path: Path) -> None:
    import time

    import anyio
    from mcp import Client, StdioServerParameters

    from tests.integration.conftest import SERVERS

    config = {"mcpServers": {"awkward-names": {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]}}}
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--config", str(tmp_path / "mcp.json"), "--no-audit", "--pii", "tokenize",
              "--session-ttl", "3"],
        env=child_env(XDG_STATE_HOME=str(tmp_path / "state")),
    )  # fmt: skip

    async def run(client: Client, to: str, **arguments: object) -> dict[str, object]:
        reply = await client.call_tool("run_python", {"code": ECHO.format(to=to), **arguments})
        assert reply.structured_content is not None, reply
        return reply.structured_content

    async def main() -> tuple[str, list[str], str, dict[str, object], dict[str, object]]:
        with anyio.fail_after(120):
            async with Client(params, mode="auto") as client:
                first = await run(client, "'alice' + '@example.com'", session=True)
                session, alice = first["session_id"], first["result"]["data"]  # type: ignore[index]
                started, seen = time.monotonic(), []
                while time.monotonic() - started < 4.5:  # used all along, for longer than the TTL
                    again = await run(client, repr(alice), session_id=session)
                    seen.append(again["result"]["data"])  # type: ignore[index]
                bob = (await run(client, "'bob' + '@example.com'", session_id=session))["result"]["data"]  # type: ignore[index]
                directory = tmp_path / "state" / "wasmexec" / "sessions" / str(session)
                while directory.exists():  # now unused, it expires: polled (the reaper removes it)
                    await anyio.sleep(0.2)
                fresh = await run(client, repr(alice), session=True)
                other = await run(client, repr(alice))
                return alice, seen, bob, fresh, other

    alice, seen, bob, fresh, other = anyio.run(main)
    assert alice.startswith("<EMAIL_1_") and set(seen) == {alice}  # restored and scrubbed back to the same token
    assert bob.startswith("<EMAIL_2_") and bob != alice  # never a token already given
    for refused in (fresh, other):  # an ended session's token is refused, never resolved to a new value
        error = refused["result"]["error"]["message"]  # type: ignore[index]
        assert not refused["result"]["ok"] and alice in error and "ended" in error, refused  # type: ignore[index]
