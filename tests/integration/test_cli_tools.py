"""`wasmexec tools …` and `wasmexec run --config` as a user runs them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import SERVERS
from wasmexec import Runtime


@pytest.fixture
def config(tmp_path: Path, runtime: Runtime) -> Path:
    path = tmp_path / "mcp.json"
    servers = {
        "slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]},
        "awkward-names": {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]},
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def wasmexec(
    *args: str, cwd: Path | None = None, runtime: Runtime | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {})}
    if runtime is not None:
        env["WASMEXEC_CACHE_DIR"] = str(runtime.artifacts.directory)
    return subprocess.run([sys.executable, "-m", "wasmexec", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env, check=False)  # fmt: skip


def test_tools_list_shows_every_server_and_tool(config: Path, runtime: Runtime) -> None:
    done = wasmexec("tools", "list", "--config", str(config), runtime=runtime)
    assert done.returncode == 0, done.stderr
    assert "slow (servers.slow): 1 tools" in done.stdout
    assert "awkward-names (servers.awkward_names)" in done.stdout and "get_user__2" in done.stdout


def test_tools_list_json_for_one_server(config: Path, runtime: Runtime) -> None:
    done = wasmexec("tools", "list", "slow", "--json", "--config", str(config), runtime=runtime)
    assert json.loads(done.stdout)["slow"][0]["export_name"] == "sleep_for"


def test_tools_search_ranks_and_show_prints_signature_and_schema(config: Path, runtime: Runtime) -> None:
    done = wasmexec("tools", "search", "sleep", "--config", str(config), runtime=runtime)
    assert done.stdout.splitlines()[0].startswith("slow.sleep_for")
    done = wasmexec("tools", "show", "awkward-names", "structured_output", "--config", str(config), runtime=runtime)
    assert done.returncode == 0
    assert done.stdout.startswith("async def structured_output(") and '"required"' in done.stdout


def test_tools_stubs_prints_an_importable_module(config: Path, runtime: Runtime, tmp_path: Path) -> None:
    done = wasmexec("tools", "stubs", "awkward-names", "--config", str(config), runtime=runtime)
    assert done.returncode == 0, done.stderr
    module = tmp_path / "awkward_stub.py"
    module.write_text(done.stdout)
    checked = subprocess.run([sys.executable, "-c", f"import runpy; ns = runpy.run_path({str(module)!r}); "
                              "print(sorted(n for n in ns if n.startswith('get_user')))"],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "get_user__4" in checked.stdout


def test_tools_refresh_reports_each_server(config: Path, runtime: Runtime) -> None:
    done = wasmexec("tools", "refresh", "--config", str(config), runtime=runtime)
    assert done.returncode == 0
    assert "slow: ok" in done.stdout and "awkward-names: ok" in done.stdout


def test_unknown_server_and_tool_exit_1_with_a_suggestion(config: Path, runtime: Runtime) -> None:
    done = wasmexec("tools", "show", "slo", "sleep_for", "--config", str(config), runtime=runtime)
    assert done.returncode == 1 and "Did you mean 'slow'" in done.stderr
    done = wasmexec("tools", "show", "slow", "sleep", "--config", str(config), runtime=runtime)
    assert done.returncode == 1 and "sleep_for" in done.stderr


def test_a_missing_or_malformed_config_is_a_clear_usage_error(tmp_path: Path, runtime: Runtime) -> None:
    done = wasmexec("tools", "list", "--config", str(tmp_path / "none.json"), runtime=runtime)
    assert done.returncode == 2 and "cannot read the MCP server config" in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"tools": {}}')  # ("servers" is VS Code's key, read like "mcpServers")
    done = wasmexec("tools", "list", "--config", str(bad), runtime=runtime)
    assert done.returncode == 2 and '"mcpServers"' in done.stderr
    assert "Traceback" not in done.stderr


def test_one_bad_entry_is_skipped_with_a_warning_naming_it(tmp_path: Path, runtime: Runtime) -> None:
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({"mcpServers": {
        "slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]},
        "oops": {"args": ["no command"]},
    }}))  # fmt: skip
    done = wasmexec("tools", "list", "--config", str(path), runtime=runtime)
    assert done.returncode == 0
    assert "server 'oops'" in done.stderr and "slow (servers.slow)" in done.stdout


def test_a_config_whose_every_entry_was_skipped_is_named_not_called_missing(tmp_path: Path) -> None:
    path = tmp_path / "only-bad.json"
    path.write_text(json.dumps({"mcpServers": {"oops": {"args": ["no command"]}}}))
    done = wasmexec("tools", "list", "--config", str(path))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        f"error: {path} has no MCP server to use (every entry was skipped: see the warnings above)"
    )
    assert "pass --config" not in done.stderr


def test_a_server_whose_command_does_not_exist_says_so_and_where_it_looked(tmp_path: Path, runtime: Runtime) -> None:
    path = tmp_path / "missing.json"
    path.write_text(json.dumps({"mcpServers": {"gone": {"command": "wasmexec-no-such-server"}}}))
    done = wasmexec("tools", "list", "--config", str(path), "--server-stderr", runtime=runtime,
                    env={"PATH": f"/opt/nowhere:{os.environ['PATH']}"})  # fmt: skip
    assert done.returncode == 1
    assert "its command 'wasmexec-no-such-server' was not found on the host's PATH" in done.stderr
    assert "try again later" not in done.stderr
    assert "searched PATH=/opt/nowhere:" in done.stderr  # the operator sees where; the guest never does
    code = "import servers.gone as g\nawait g.anything()"
    ran = wasmexec("run", "--config", str(path), "--no-audit", "-c", code, runtime=runtime)
    result = json.loads(ran.stdout)
    assert "was not found on the host's PATH" in result["result"]["error"]["message"]
    assert result["result"]["error"]["retryable"] is False
    assert "/opt/nowhere" not in ran.stdout
    assert "try again later" not in ran.stdout
    assert 'fix \\"command\\" in the MCP config' in ran.stdout


def test_run_with_config_calls_tools_and_reads_mcp_json_by_default(config: Path, runtime: Runtime) -> None:
    code = "import servers.slow as s\nawait s.sleep_for(seconds=0.01)"
    done = wasmexec("run", "--config", str(config), "-c", code, runtime=runtime)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["data"] == {"result": 0.01}
    (config.parent / ".mcp.json").write_text(config.read_text())
    done = wasmexec("run", "-c", code, cwd=config.parent, runtime=runtime)
    assert json.loads(done.stdout)["tool_trace"][0]["tool_name"] == "sleep_for"


def test_run_max_tool_calls(config: Path, runtime: Runtime) -> None:
    code = "import servers.slow as s\nfor _ in range(3):\n    await s.sleep_for(seconds=0)"
    done = wasmexec("run", "--config", str(config), "--max-tool-calls", "2", "-c", code, runtime=runtime)
    assert done.returncode == 1
    assert json.loads(done.stdout)["diagnostics"][-1]["limit"] == "tool_calls"


def test_run_allow_and_deny_flags_apply_the_policy(config: Path, runtime: Runtime) -> None:
    code = "import servers.slow as s\nawait s.sleep_for(seconds=0)"
    done = wasmexec("run", "--config", str(config), "--deny", "slow.*", "-c", code, runtime=runtime)
    result = json.loads(done.stdout)
    assert result["result"]["error"]["type"] == "ApprovalDeniedError"
    (refused,) = result["tool_trace"]  # the attempt is traced, refused before the server saw it
    assert refused["ok"] is False and refused["error"].startswith("denied:")
    done = wasmexec("run", "--config", str(config), "--allow", "awkward-names.*", "-c", code, runtime=runtime)
    assert json.loads(done.stdout)["result"]["error"]["type"] == "ApprovalDeniedError"
    done = wasmexec("run", "--config", str(config), "--allow", "slow.sleep_for", "-c", code, runtime=runtime)
    assert json.loads(done.stdout)["result"]["ok"]


def test_run_approve_lets_a_destructive_call_through_and_audits_it(config: Path, runtime: Runtime,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    code = "import servers.awkward_names as a\nawait a.delete_item(item_id='7')"
    audit = tmp_path / "audit.jsonl"
    done = wasmexec("run", "--config", str(config), "--audit-log", str(audit), "-c", code, runtime=runtime)
    assert json.loads(done.stdout)["approval_state"] == "DENIED"  # no TTY, nobody to ask
    done = wasmexec("run", "--config", str(config), "--approve", "awkward-names.delete_*", "--audit-log", str(audit),
                    "-c", code, runtime=runtime)  # fmt: skip
    result = json.loads(done.stdout)
    assert result["result"]["ok"] and result["approval_state"] == "APPROVED"  # approved in advance
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [line["kind"] for line in lines].count("run") == 2
    assert any(line["kind"] == "tool_call" and line.get("approval") == "pre_approved" for line in lines)


BANNER = "banner-from-a-chatty-server"


@pytest.fixture
def chatty(tmp_path: Path) -> Path:
    """A server that writes a banner to stderr when it starts, as many stdio servers do."""
    path = tmp_path / "chatty.json"
    script = f"echo {BANNER} >&2; exec {shlex.quote(sys.executable)} {shlex.quote(str(SERVERS / 'slow.py'))}"
    path.write_text(json.dumps({"mcpServers": {"slow": {"command": "sh", "args": ["-c", script]}}}))
    return path


def test_server_stderr_goes_to_the_server_log_not_the_terminal(chatty: Path, runtime: Runtime) -> None:
    log = Path(os.environ["XDG_STATE_HOME"]) / "wasmexec" / "servers.log"
    before = log.read_text().count(BANNER) if log.exists() else 0
    code = "import servers.slow as s\nawait s.sleep_for(seconds=0)"
    done = wasmexec("run", "--config", str(chatty), "--no-audit", "-c", code, runtime=runtime)
    assert done.returncode == 0, done.stderr
    assert BANNER not in done.stderr
    done = wasmexec("tools", "refresh", "--config", str(chatty), runtime=runtime)
    assert done.returncode == 0 and BANNER not in done.stderr
    assert log.read_text().count(BANNER) == before + 2


def test_server_stderr_reaches_the_terminal_when_asked_for(chatty: Path, runtime: Runtime) -> None:
    code = "import servers.slow as s\nawait s.sleep_for(seconds=0)"
    done = wasmexec("run", "--config", str(chatty), "--no-audit", "--server-stderr", "-c", code, runtime=runtime)
    assert done.returncode == 0 and BANNER in done.stderr
    done = wasmexec("tools", "refresh", "--server-stderr", "--config", str(chatty), runtime=runtime)
    assert done.returncode == 0 and BANNER in done.stderr


def test_the_schema_cache_lives_where_this_test_session_says(config: Path, runtime: Runtime) -> None:
    """Not beside the compiled artifacts (a shipped, read-only directory) and not in the user's real cache."""
    cache = Path(os.environ["WASMEXEC_SCHEMA_CACHE"])
    assert not cache.is_relative_to(Path.home())
    done = wasmexec("tools", "refresh", "--config", str(config), runtime=runtime)
    assert done.returncode == 0 and '"slow"' in cache.read_text()


def test_tools_list_with_a_warm_schema_cache_starts_no_server(chatty: Path, runtime: Runtime, tmp_path: Path) -> None:
    """Each start of the server leaves its banner in the server log: the second listing must leave none."""
    log = Path(os.environ["XDG_STATE_HOME"]) / "wasmexec" / "servers.log"
    env = {"WASMEXEC_SCHEMA_CACHE": str(tmp_path / "schemas.json")}
    first = wasmexec("tools", "list", "--config", str(chatty), runtime=runtime, env=env)
    assert first.returncode == 0, first.stderr
    started = log.read_text().count(BANNER)
    second = wasmexec("tools", "list", "--config", str(chatty), runtime=runtime, env=env)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert log.read_text().count(BANNER) == started
