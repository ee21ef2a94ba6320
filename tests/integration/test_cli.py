"""`wasmexec` as a user runs it: a subprocess, one JSON line on stdout, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wasmexec import Runtime, validate_run_result


def wasmexec(*args: str, stdin: str = "", cache_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if cache_dir is not None:
        env["WASMEXEC_CACHE_DIR"] = str(cache_dir)
    return subprocess.run(
        [sys.executable, "-m", "wasmexec", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.fixture
def cached(runtime: Runtime) -> Path:
    """The cache directory the session's runtime built into."""
    return runtime.artifacts.directory


def one_json_line(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    result = json.loads(lines[0])
    validate_run_result(result)
    return result


def test_run_c_prints_one_json_line_and_exits_0(cached: Path) -> None:
    done = wasmexec("run", "-c", "print('hi')\nresult = 6 * 7", cache_dir=cached)
    assert done.returncode == 0, done.stderr
    result = one_json_line(done.stdout)
    assert result["result"]["data"] == 42
    assert result["logs"][0]["message"] == "hi"
    assert done.stderr == ""


def test_failing_code_exits_1_with_the_error_in_the_json(cached: Path) -> None:
    done = wasmexec("run", "-c", "raise KeyError('k')", cache_dir=cached)
    assert done.returncode == 1
    assert one_json_line(done.stdout)["result"]["error"]["type"] == "KeyError"


def test_run_reads_a_file(cached: Path, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("result = sum(range(5))\n")
    done = wasmexec("run", str(script), cache_dir=cached)
    assert one_json_line(done.stdout)["result"]["data"] == 10


def test_run_dash_reads_stdin(cached: Path) -> None:
    done = wasmexec("run", "-", stdin="result = 'from stdin'", cache_dir=cached)
    assert one_json_line(done.stdout)["result"]["data"] == "from stdin"


def test_limit_options_apply(cached: Path) -> None:
    done = wasmexec("run", "--timeout-ms", "300", "-c", "while True: pass", cache_dir=cached)
    assert done.returncode == 1
    result = one_json_line(done.stdout)
    assert result["diagnostics"][-1]["limit"] == "timeout"
    done = wasmexec("run", "--max-log-bytes", "5", "-c", "print('0123456789')", cache_dir=cached)
    assert one_json_line(done.stdout)["logs"][0]["message"] == "01234"
    done = wasmexec("run", "--no-fuel", "-c", "result = 1", cache_dir=cached)
    assert one_json_line(done.stdout)["result"]["metrics"]["fuel_used"] is None
    done = wasmexec("run", "--fuel", "1000000", "-c", "while True: pass", cache_dir=cached)
    assert one_json_line(done.stdout)["diagnostics"][-1]["limit"] == "fuel"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--timeout-ms", "abc", "-c", "1"], "expected an integer, got 'abc'"),
        (["run", "--timeout-ms", "0", "-c", "1"], "must be at least 1"),
        (["run", "--memory-mb", "999999", "-c", "1"], "memory_mb must be between"),
        (["run"], "one of the arguments"),
        (["run", "-c", "1", "file.py"], "not allowed with"),
        (["run", "/no/such/file.py"], "cannot read /no/such/file.py"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2_with_a_clear_message_and_no_stdout(cached: Path, args: list[str], message: str) -> None:
    done = wasmexec(*args, cache_dir=cached)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr


def test_a_file_that_is_not_utf8_is_a_usage_error(cached: Path, tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_bytes(b"x = '\xff'\n")
    done = wasmexec("run", str(script), cache_dir=cached)
    assert done.returncode == 2 and "not UTF-8" in done.stderr


def test_schema_prints_the_run_result_json_schema() -> None:
    done = wasmexec("schema")
    assert done.returncode == 0
    assert "run_id" in json.loads(done.stdout)["required"]
