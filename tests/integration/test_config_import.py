"""`wasmexec config import` and `--config auto` against other clients' configs in a temporary HOME."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import SERVERS
from wasmexec import Runtime

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "client-configs"


class User:
    """A home directory with every client's config in its Linux place, and a project directory."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.project = root / "project"
        self.project.mkdir(parents=True)
        code_user = self.home / ".config" / "Code" / "User"
        places = {
            "claude_desktop_config.json": self.home / ".config" / "Claude" / "claude_desktop_config.json",
            "claude.json": self.home / ".claude.json",
            "project.mcp.json": self.project / ".mcp.json",
            "cursor.json": self.home / ".cursor" / "mcp.json",
            "vscode.mcp.json": self.project / ".vscode" / "mcp.json",
            "windsurf.json": self.home / ".codeium" / "windsurf" / "mcp_config.json",
            "cline_mcp_settings.json": code_user / "globalStorage" / "saoudrizwan.claude-dev" / "settings"
            / "cline_mcp_settings.json",
        }  # fmt: skip
        for fixture, place in places.items():
            place.parent.mkdir(parents=True, exist_ok=True)
            place.write_text((FIXTURES / fixture).read_text().replace("PROJECT_DIR", str(self.project)))

    def wasmexec(self, *args: str, runtime: Runtime | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        environ = {key: value for key, value in os.environ.items() if not key.startswith("WASMEXEC_CONFIG")}
        environ.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"), **env)
        environ.pop("APPDATA", None)
        if runtime is not None:
            environ["WASMEXEC_CACHE_DIR"] = str(runtime.artifacts.directory)
        return subprocess.run([sys.executable, "-m", "wasmexec", *args], capture_output=True, text=True,
                              timeout=120, cwd=self.project, env=environ, check=False)  # fmt: skip


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path)


def test_import_merges_every_clients_servers_into_a_private_portable_config(user: User) -> None:
    done = user.wasmexec("config", "import")  # the default output, ./.mcp.json, is Claude Code's project file here
    assert done.returncode == 2 and "exists; pass --force" in done.stderr
    output = user.project / "wasmexec.json"
    done = user.wasmexec("config", "import", "--output", str(output))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    servers = json.loads(output.read_text())["mcpServers"]
    assert sorted(servers) == ["docs", "fs", "github", "legacy", "local-db", "memory", "old-thing", "perplexity",
                               "remote", "search", "shared"]  # fmt: skip
    assert servers["shared"] == {"command": "shared-from-the-project"}  # Claude Code's project scope wins
    assert servers["search"]["headers"] == {"Authorization": "Bearer ${SEARCH_TOKEN}"}  # never expanded into the file
    assert servers["github"]["env"] == {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}  # Cursor's ${env:…}
    assert servers["docs"] == {"url": "https://docs.example.com/mcp", "headers": {"X-Api-Key": "${DOCS_KEY}"}}
    assert servers["fs"] == {"type": "stdio", "command": "fs-mcp", "args": ["/data"], "autoApprove": ["read_file"],
                             "timeout": 120, "disabled": False}  # fmt: skip
    perplexity = servers["perplexity"]
    assert perplexity["command"] == f"{user.project}/tools/perplexity-mcp"
    assert perplexity["envFile"] == f"{user.project}/config/dev.env"
    assert perplexity["env"] == {"PPLX_CREDENTIAL": "${PERPLEXITY_KEY}"} and perplexity["secrets"] == [
        "PPLX_CREDENTIAL"
    ]
    assert "not-this-project" not in servers and "dev" not in perplexity
    assert servers["legacy"] == {"type": "sse", "url": "https://legacy.example.com/sse"}
    for said in ("left out", "shared", "dropped keys ['dev']", "claude-desktop", "SEARCH_TOKEN"):
        assert said in done.stderr, said


def test_import_never_overwrites_without_force_and_can_print_instead(user: User) -> None:
    output = user.project / "wasmexec.json"
    output.write_text("mine")
    done = user.wasmexec("config", "import", "--output", str(output))
    assert done.returncode == 2 and "exists; pass --force" in done.stderr and output.read_text() == "mine"
    done = user.wasmexec("config", "import", "--output", str(output), "--force", "--from", "windsurf")
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(output.read_text())["mcpServers"]) == ["docs", "old-thing"]
    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    printed = user.wasmexec("config", "import", "--output", "-", "--from", str(FIXTURES / "cursor.json"))
    assert sorted(json.loads(printed.stdout)["mcpServers"]) == ["github", "shared"]


def test_import_with_nothing_to_find_writes_an_empty_config_that_run_accepts(tmp_path: Path, runtime: Runtime) -> None:
    empty = User.__new__(User)
    empty.home, empty.project = tmp_path / "home", tmp_path / "project"
    empty.project.mkdir(parents=True)
    output = empty.home / ".config" / "wasmexec" / "mcp.json"  # the path the docs use; its directory is made
    done = empty.wasmexec("config", "import", "--output", str(output))
    assert done.returncode == 0, done.stderr
    assert "no MCP servers found" in done.stderr and "wrote an empty config" in done.stderr
    assert json.loads(output.read_text()) == {"mcpServers": {}}
    ran = empty.wasmexec("run", "--config", str(output), "--no-audit", "-c", "result = 6 * 7", runtime=runtime)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["result"]["data"] == 42
    done = empty.wasmexec("config", "import", "--from", "no-such-client")
    assert done.returncode == 2 and "no-such-client: no such file" in done.stderr


def test_config_auto_reads_a_cline_config_in_place_with_its_approvals_and_variables(
    user: User, runtime: Runtime
) -> None:
    cline = user.home / ".config/Code/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json"
    entry = {"command": sys.executable, "args": ["${SERVERS_DIR}/awkward.py"], "autoApprove": ["delete_item"],
             "timeout": 60, "watchPaths": []}  # fmt: skip
    cline.write_text(json.dumps({"mcpServers": {"awkward-names": entry}}))
    for other in (user.project / ".mcp.json", user.home / ".claude.json", user.project / ".vscode" / "mcp.json"):
        other.unlink()
    code = "import servers.awkward_names as a\nawait a.delete_item(item_id='7')"
    done = user.wasmexec("run", "--config", "auto", "--no-audit", "-c", code, runtime=runtime, SERVERS_DIR=str(SERVERS))
    result = json.loads(done.stdout)
    assert result["result"]["ok"] and result["approval_state"] == "APPROVED", done.stderr  # Cline's autoApprove
    assert "dropped keys ['watchPaths']" in done.stderr
    assert "'search'" not in done.stderr  # its file was removed
    listed = user.wasmexec("tools", "list", "awkward-names", "--config", "auto", "--json")  # no SERVERS_DIR
    assert listed.returncode == 1  # the other clients' servers are still there; this one is not
    assert "awkward-names" in listed.stderr and "SERVERS_DIR" in listed.stderr


def test_serve_config_auto_reaches_the_servers_of_claude_desktop(tmp_path: Path, runtime: Runtime) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    from tests.integration.conftest import child_env

    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    desktop = home / ".config" / "Claude" / "claude_desktop_config.json"
    desktop.parent.mkdir(parents=True)
    entry = {"command": sys.executable, "args": ["${SERVERS_DIR:-/nowhere}/slow.py"]}
    desktop.write_text(json.dumps({"mcpServers": {"slow": entry}, "globalShortcut": ""}))
    env = child_env(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), SERVERS_DIR=str(SERVERS),
                    WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory))  # fmt: skip
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]  # the wasmexec under test
    params = StdioServerParameters(command=sys.executable, args=["-m", "wasmexec", "serve", "--config", "auto",
                                                                 "--no-audit"], env=env, cwd=project)  # fmt: skip

    async def main() -> dict[str, object]:
        with anyio.fail_after(120):
            async with Client(params) as client:
                code = "import servers.slow as s\nresult = await s.sleep_for(seconds=0)"
                called = await client.call_tool("run_python", {"code": code})
                return dict(called.structured_content or {})

    result = anyio.run(main)
    assert result["result"] == {"ok": True, "data": {"result": 0.0}, "metrics": result["result"]["metrics"]}  # type: ignore[index]
