"""Five agent tasks, each one `run_python` call written from the description and discovery alone.

A real `mcp` client drives `wasmexec serve` in front of real servers (filesystem, memory, git,
time). Each script is what a model writes on its first try after reading the tool's
description: it finds tools with `codemode.discovery`, reads shapes from `get_tool`, and
never relies on knowledge of the servers that the sandbox did not give it. The answers
are checked against the ground truth computed on the host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import data_of
from tests.integration.conftest import NODE_BIN, child_env
from wasmexec import Runtime

FILES = {
    "notes.txt": "alpha beta\ngamma delta epsilon\n",
    "todo.md": "# Todo\n- buy milk\n",
    "data.csv": "x,y\n1,2\n3,4\n",
}
AUTHORS = [("Alice", 3), ("Bob", 2), ("Carol", 1)]


def _git(repo: Path, *args: str, author: str = "Alice") -> None:
    env = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": f"{author.lower()}@example.com",
           "GIT_COMMITTER_NAME": author, "GIT_COMMITTER_EMAIL": f"{author.lower()}@example.com",
           "HOME": str(repo), "PATH": "/usr/bin:/bin"}  # fmt: skip
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, runtime: Runtime) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("agent")
    files = tmp / "files"
    files.mkdir()
    for name, text in FILES.items():
        (files / name).write_text(text)
    repo = tmp / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    for author, count in AUTHORS:
        for index in range(count):
            _git(repo, "commit", "-q", "--allow-empty", "-m", f"{author} {index}", author=author)
    bin_dir = Path(sys.executable).parent
    config = {"mcpServers": {
        "filesystem": {"command": str(NODE_BIN / "mcp-server-filesystem"), "args": [str(files)]},
        "memory": {"command": str(NODE_BIN / "mcp-server-memory"),
                   "env": {"MEMORY_FILE_PATH": str(tmp / "memory.jsonl")}},
        "git": {"command": str(bin_dir / "mcp-server-git"), "args": ["--repository", str(repo)]},
        "time": {"command": str(bin_dir / "mcp-server-time"), "args": ["--local-timezone", "UTC"]},
    }}  # fmt: skip
    (tmp / "mcp.json").write_text(json.dumps(config))
    return {"tmp": tmp, "files": files, "repo": repo, "config": tmp / "mcp.json", "cache": runtime.artifacts.directory}


def _agent(world: dict[str, Path], task: Callable[[Client], Awaitable[Any]]) -> Any:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--config", str(world["config"]), "--timeout-ms", "60000"],
        env=child_env(WASMEXEC_CACHE_DIR=str(world["cache"])),
    )

    async def main() -> Any:
        with anyio.fail_after(180):
            async with Client(params, mode="auto") as client:
                return await task(client)

    return anyio.run(main)


async def _run_python(client: Client, code: str) -> Any:
    """One first-try call: the run must succeed, and its data is returned."""
    answer = await client.call_tool("run_python", {"code": code})
    assert not answer.is_error, answer
    return data_of(answer.structured_content)


def test_search_then_read_three_files_and_summarize(world: dict[str, Path]) -> None:
    code = f"""
import asyncio
from codemode import discovery
hits = discovery.search_tools("read text file")["results"]
reader = next(h for h in hits if h["tool_name"] == "read_text_file")
lister = next(h for h in discovery.search_tools("list directory")["results"] if h["tool_name"] == "list_directory")
shape = discovery.get_tool("filesystem", reader["tool_name"])["output_schema"]
(key,) = shape["required"]  # the text sits under this key of the structured result
import servers.filesystem as fs
listing = await fs.list_directory(path={str(world["files"])!r})
names = sorted(line.split("] ", 1)[1] for line in listing[key].splitlines() if line.startswith("[FILE]"))
texts = await asyncio.gather(*(fs.read_text_file(path={str(world["files"])!r} + "/" + n) for n in names))
result = {{n: {{"lines": len(t[key].splitlines()), "words": len(t[key].split())}} for n, t in zip(names, texts)}}
"""
    data = _agent(world, lambda client: _run_python(client, code))
    expected = {name: {"lines": len(text.splitlines()), "words": len(text.split())} for name, text in FILES.items()}
    assert data == expected


def test_memory_graph_entities_relations_and_query(world: dict[str, Path]) -> None:
    code = """
from codemode import discovery
tools = {t["tool_name"] for t in discovery.search_tools("entities relations graph", limit=20)["results"]}
assert {"create_entities", "create_relations", "search_nodes"} <= tools, tools
import servers.memory as memory
await memory.create_entities(entities=[
    {"name": "Ada", "entityType": "person", "observations": ["writes programs"]},
    {"name": "Engine", "entityType": "machine", "observations": ["analytical"]},
    {"name": "Babbage", "entityType": "person", "observations": ["designed the engine"]},
])
await memory.create_relations(relations=[
    {"from": "Ada", "to": "Engine", "relationType": "programs"},
    {"from": "Babbage", "to": "Engine", "relationType": "designed"},
])
found = await memory.search_nodes(query="person")
graph = await memory.read_graph()
result = {
    "people": sorted(e["name"] for e in found["entities"] if e["entityType"] == "person"),
    "into_engine": sorted(r["from"] + " " + r["relationType"] for r in graph["relations"] if r["to"] == "Engine"),
}
"""
    data = _agent(world, lambda client: _run_python(client, code))
    assert data == {"people": ["Ada", "Babbage"], "into_engine": ["Ada programs", "Babbage designed"]}


def test_count_commits_per_author(world: dict[str, Path]) -> None:
    code = f"""
from collections import Counter
from codemode import discovery
tool = discovery.get_tool("git", "git_log", detail="full")
assert "max_count" in tool["input_schema"]["properties"], tool["input_schema"]
import servers.git as git
log = await git.git_log(repo_path={str(world["repo"])!r}, max_count=1000)
text = log if isinstance(log, str) else str(log)
result = dict(Counter(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Author:")))
"""
    data = _agent(world, lambda client: _run_python(client, code))
    assert data == dict(AUTHORS)
    assert sum(data.values()) == sum(Counter(dict(AUTHORS)).values())


def test_convert_time_and_cross_check_with_zoneinfo(world: dict[str, Path]) -> None:
    code = """
from datetime import datetime
from zoneinfo import ZoneInfo
from codemode import discovery
tool = discovery.get_tool("time", "convert_time")
props = tool["input_schema"]["properties"]
import servers.time as t
answer = await t.convert_time(source_timezone="America/New_York", time="14:30", target_timezone="Asia/Tokyo")
theirs = datetime.fromisoformat(answer["target"]["datetime"])
source = datetime.fromisoformat(answer["source"]["datetime"])
mine = source.astimezone(ZoneInfo("Asia/Tokyo"))
agrees = theirs == mine and theirs.utcoffset() == mine.utcoffset()
result = {"params": sorted(props), "target": theirs.isoformat(), "agrees": agrees}
"""
    data = _agent(world, lambda client: _run_python(client, code))
    assert data["params"] == ["source_timezone", "target_timezone", "time"]
    assert data["agrees"] is True
    assert data["target"].endswith("T04:30:00+09:00") or data["target"].endswith("T03:30:00+09:00")  # EST or EDT


def test_wrong_arguments_then_the_hint_leads_to_success(world: dict[str, Path]) -> None:
    code = """
import servers.time as t
from codemode.errors import SchemaValidationError
try:
    await t.get_current_time(tz="Europe/Berlin")
    raise AssertionError("a call without the required argument succeeded")
except SchemaValidationError as e:
    hint, missing = e.hint, [err["expected"] for err in e.errors]
    example = e.detail["example"]
    fixed = {key: "Europe/Berlin" for key in example}
answer = await t.get_current_time(**fixed)
result = {"hint": hint, "missing": missing, "fixed": sorted(fixed), "timezone": answer["timezone"]}
"""
    data = _agent(world, lambda client: _run_python(client, code))
    assert data["fixed"] == ["timezone"]
    assert data["timezone"] == "Europe/Berlin"
    assert "get_tool" in data["hint"]
