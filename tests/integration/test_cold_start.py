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
import gc
print(json.dumps({"code": code, "stdout": out.getvalue(), "modules": sorted(sys.modules), "started": started,
                  "run_dirs_left": left, "gc": [gc.isenabled(), gc.get_freeze_count()]}))
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


def test_main_called_in_a_process_of_its_own_leaves_its_garbage_collector_alone(cached: Path, tmp_path: Path) -> None:
    report = _probe(cached, tmp_path, "run", "-c", "result = 1")
    assert report["code"] == 0
    assert report["gc"] == [True, 0]


#: `python -m wasmexec` as a process of its own, reporting at exit the garbage collections made during
#: its start (from the import of the command line to the first freeze), whether the collector is on,
#: and how much was frozen.
_GC_PROBE = """
import atexit, gc, json, os, runpy, sys
early = []
def starting() -> bool:
    return "wasmexec._cli.main" in sys.modules and not gc.get_freeze_count()
gc.callbacks.append(lambda phase, info: early.append(info) if phase == "start" and starting() else None)
atexit.register(lambda: os.write(2, json.dumps({"early": len(early), "enabled": gc.isenabled(),
                                                "frozen": gc.get_freeze_count()}).encode()))
runpy.run_module("wasmexec", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("code", ["result = 1", "import gc\nresult = gc.collect() >= 0"])
def test_a_run_process_collects_no_garbage_while_it_starts_and_collects_again_for_the_run(
    cached: Path, tmp_path: Path, code: str
) -> None:
    """About 50 collections scanned the start's ~28,000 long-lived objects again and again (10 ms of CPU)."""
    env = {key: value for key, value in os.environ.items() if key not in ("WASMEXEC_CONFIG", "PYTHONPATH")}
    env.update(PYTHONPATH=str(REPO), WASMEXEC_CACHE_DIR=str(cached))
    done = subprocess.run([sys.executable, "-c", _GC_PROBE, "run", "--no-audit", "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["data"] in (1, True)
    report = json.loads(done.stderr)
    assert report["early"] == 0
    assert report["enabled"] is True
    assert report["frozen"] > 10_000


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


#: `python -m wasmexec` with an object whose `__del__` says so when the interpreter tears down its modules.
_TEARDOWN_PROBE = """
import os, sys
class Teardown:
    def __del__(self) -> None:
        os.write(2, b"interpreter teardown ran")
sys.modules["teardown_probe"] = Teardown()  # type: ignore[assignment]
from wasmexec._cli.main import main
sys.exit(main())
"""


def _wasmexec(cached: Path, cwd: Path, *args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """A real `wasmexec` process: main() as the entry point, its temporary directories under cwd/tmp."""
    (cwd / "tmp").mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key not in ("WASMEXEC_CONFIG", "PYTHONPATH")}
    env.update(PYTHONPATH=str(REPO), WASMEXEC_CACHE_DIR=str(cached), TMPDIR=str(cwd / "tmp"))
    return subprocess.run([sys.executable, "-c", _TEARDOWN_PROBE, *args], cwd=cwd, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120, check=False)  # fmt: skip


def test_a_run_process_skips_the_interpreter_teardown(cached: Path, tmp_path: Path) -> None:
    """Tearing down ~200 modules and the wasmtime objects cost every `run` 20-30 ms of CPU (issue 19)."""
    done = _wasmexec(cached, tmp_path, "run", "--no-audit", "-c", "result = 1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["data"] == 1
    assert done.stderr == ""


def test_other_commands_still_tear_down(cached: Path, tmp_path: Path) -> None:
    """The probe above can see a teardown: `schema` is not a fast-exit command."""
    done = _wasmexec(cached, tmp_path, "schema")
    assert done.returncode == 0
    assert done.stderr == "interpreter teardown ran"


@pytest.mark.parametrize("to", ["pipe", "file"])
@pytest.mark.parametrize(("code", "status"), [("result = 'x' * 100_000", 0), ("1 / 0", 1)])
def test_a_fast_exit_loses_no_output_artifact_audit_line_or_run_directory(
    cached: Path, tmp_path: Path, to: str, code: str, status: int
) -> None:
    """Everything the teardown did that matters still happens: stdout complete, the artifact written, the
    audit line appended, the run directories removed (an atexit hook), and the exit status is the run's."""
    audit, out = tmp_path / "audit.jsonl", tmp_path / "out"
    args = ("run", "--audit-log", str(audit), "--output-dir", str(out), "-c", f"open('a.txt', 'w').write('a')\n{code}")
    with open(tmp_path / "stdout.txt", "w+", encoding="utf-8") as file:
        done = _wasmexec(cached, tmp_path, *args, stdout=subprocess.PIPE if to == "pipe" else file)
        file.seek(0)
        stdout = done.stdout if to == "pipe" else file.read()
    assert done.returncode == status, done.stderr
    assert done.stderr == ""
    result = json.loads(stdout)
    assert stdout.endswith("}\n") and stdout.count("\n") == 1
    assert result["result"]["ok"] is (status == 0)
    if status == 0:  # more than a pipe holds: the reader takes it while the process flushes
        assert result["result"]["data"] == "x" * 100_000
    assert (out / "a.txt").read_text() == "a"
    assert [json.loads(line)["kind"] for line in audit.read_text().splitlines()] == ["run"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_reader_that_left_still_gets_exit_status_141(cached: Path, tmp_path: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = _wasmexec(cached, tmp_path, "run", "--no-audit", "-c", "result = 'x' * 100_000", stdout=writer)
    finally:
        os.close(writer)
    assert done.returncode == 141
    assert "Traceback" not in done.stderr
