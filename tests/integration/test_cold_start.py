"""`wasmexec run -c` loads only what a run without tools needs (issue 19: the cold start).

A process start pays for every module it imports and for every parser it builds, so these
tests look at what a real `run -c` in a fresh interpreter left in `sys.modules`, and at the
processes it started. They assert what is loaded, never how long it took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wasmexec import Runtime

REPO = Path(__file__).resolve().parents[2]
#: Modules a run without tools never needs: the MCP stack, the server, the tool broker, the
#: state dir (and its cryptography), and the other commands' parsers.
HEAVY = (
    "anyio", "asyncio", "cryptography", "httpx", "mcp", "pydantic", "pydantic_core", "starlette", "uvicorn",
    "wasmexec._server", "wasmexec._state", "wasmexec._tools", "wasmexec._science",
    "wasmexec._cli.serve", "wasmexec._cli.tools", "wasmexec._cli.cache", "wasmexec._cli.config_command",
    "wasmexec._cli.auth_options",
)  # fmt: skip
#: Smaller modules a plain run used to load for nothing, 1-2 ms each: run ids (uuid), the builder's
#: subprocess, and the option parser's suggestions for a misspelt option (difflib).
AVOIDABLE = ("difflib", "subprocess", "uuid")
#: Runs `main` as `python -m wasmexec` does, then reports the exit code, stdout, the modules loaded,
#: the programs started (an audit hook sees every subprocess) and the run directories left to remove.
_PROBE = """
import contextlib, io, json, sys
started = []
sys.addaudithook(lambda event, args: started.append(str(args[0])) if event == "subprocess.Popen" else None)
from wasmexec._cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit:
        code = exit.code
from wasmexec._workspace.rundir_pool import default_pool
pool = default_pool()
pool.wait_idle()
left = sorted(path.name for path in pool.base.iterdir())
print(json.dumps({"code": code, "stdout": out.getvalue(), "modules": sorted(sys.modules), "started": started,
                  "run_dirs_left": left}))
"""


def _probe(cache_dir: Path, cwd: Path, *args: str) -> dict[str, Any]:
    # This checkout first (a child in another cwd would otherwise import the installed one); no config.
    env = {key: value for key, value in os.environ.items() if key not in ("WASMEXEC_CONFIG", "PYTHONPATH")}
    env.update(PYTHONPATH=str(REPO), WASMEXEC_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _loaded(report: dict[str, Any], prefixes: tuple[str, ...]) -> list[str]:
    return [name for name in report["modules"] if any(name == p or name.startswith(p + ".") for p in prefixes)]


@pytest.fixture
def cached(runtime: Runtime) -> Path:
    return runtime.artifacts.directory


def test_run_c_without_tools_imports_no_server_tools_or_mcp_module(cached: Path, tmp_path: Path) -> None:
    report = _probe(cached, tmp_path, "run", "-c", "result = 1")
    assert report["code"] == 0
    assert json.loads(report["stdout"])["result"]["data"] == 1
    assert _loaded(report, HEAVY) == []
    assert _loaded(report, AVOIDABLE) == []


def test_run_c_starts_no_process(cached: Path, tmp_path: Path) -> None:
    """Finding libc for inotify with `ctypes.util.find_library` ran `ldconfig -p` on every start."""
    report = _probe(cached, tmp_path, "run", "-c", "result = 1")
    assert report["code"] == 0
    assert report["started"] == []


def test_run_c_leaves_no_spare_run_directory_to_remove_at_exit(cached: Path, tmp_path: Path) -> None:
    """One run per process: spare run directories were made during the run and removed at exit (50+ ms of I/O)."""
    report = _probe(cached, tmp_path, "run", "-c", "result = 1")
    assert report["code"] == 0
    assert report["run_dirs_left"] == []


def test_the_probe_sees_the_tools_modules_a_config_loads(cached: Path, tmp_path: Path) -> None:
    (tmp_path / "servers.json").write_text('{"mcpServers": {}}', encoding="utf-8")
    report = _probe(cached, tmp_path, "run", "--config", "servers.json", "-c", "result = 1")
    assert report["code"] == 0
    assert "wasmexec._tools.config" in _loaded(report, HEAVY)


def test_run_help_lists_runs_options_and_loads_no_other_command(cached: Path, tmp_path: Path) -> None:
    report = _probe(cached, tmp_path, "run", "--help")
    assert report["code"] == 0
    assert "--timeout-ms" in report["stdout"]
    assert _loaded(report, HEAVY) == []


def test_bare_help_still_lists_every_command(cached: Path, tmp_path: Path) -> None:
    report = _probe(cached, tmp_path, "--help")
    assert report["code"] == 0
    for command in ("run", "serve", "build", "schema", "tools", "config", "cache"):
        assert f"\n    {command} " in report["stdout"], command
