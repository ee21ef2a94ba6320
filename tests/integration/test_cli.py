"""`wasmexec` as a user runs it: a subprocess, one JSON line on stdout, exit codes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from wasmexec import Runtime, validate_run_result
from wasmexec._limits import MAX_MEMORY_MB


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
        (["run", "--memory-mb", "999999", "-c", "1"], "must be at most 4095"),
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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # An abbreviation is refused, not taken for the option it starts (5 would have been 5 ms).
        (["run", "--timeout", "5", "-c", "1"], "unrecognized option --timeout; did you mean --timeout-ms?"),
        (["run", "--mem", "10", "-c", "1"], "unrecognized option --mem; did you mean --memory-mb?"),
        (["serve", "--max-sess", "1"], "unrecognized option --max-sess; did you mean --max-sessions?"),
        # A misspelt option is named, instead of its value being taken for FILE.
        (["run", "--memroy-mb", "10", "-c", "1"], "unrecognized option --memroy-mb; did you mean --memory-mb?"),
        (["run", "--memroy-mb=10", "-c", "1"], "unrecognized option --memroy-mb; did you mean --memory-mb?"),
        (["tools", "list", "--jsn"], "unrecognized option --jsn; did you mean --json?"),
        (["cache", "clean", "--dryrun"], "unrecognized option --dryrun; did you mean --dry-run?"),
    ],
)
def test_an_unknown_or_abbreviated_option_is_named_with_the_closest_one(args: list[str], message: str) -> None:
    done = wasmexec(*args)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(f"error: {message}"), done.stderr
    assert done.stdout == ""


def test_an_option_value_that_looks_like_an_option_is_still_a_value(cached: Path) -> None:
    done = wasmexec("run", "-c", "-1", cache_dir=cached)
    assert done.returncode == 0, done.stderr
    assert one_json_line(done.stdout)["result"]["data"] == -1


def test_bare_wasmexec_lists_the_commands() -> None:
    done = wasmexec()
    assert done.returncode == 2
    for command in ("run", "serve", "build", "schema", "tools", "config", "cache"):
        assert f"\n    {command} " in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [["run", "-c", "result = 1"], ["schema"]])
def test_output_into_a_pipe_whose_reader_left_is_no_traceback(cached: Path, args: list[str]) -> None:
    # `wasmexec ... | head`: the reader is gone by the time the output comes (closed before the start here).
    reader, writer = os.pipe()
    os.close(reader)
    try:
        env = {**os.environ, "WASMEXEC_CACHE_DIR": str(cached)}
        done = subprocess.run([sys.executable, "-m", "wasmexec", *args], stdout=writer, stderr=subprocess.PIPE,
                              env=env, timeout=120, check=False)  # fmt: skip
    finally:
        os.close(writer)
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert done.returncode == 141  # 128 + SIGPIPE, what a program killed by it reports


def test_an_output_dir_that_cannot_be_made_fails_before_the_run(cached: Path) -> None:
    done = wasmexec("run", "--output-dir", "/proc/nope", "-c", "print('ran')", cache_dir=cached)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "wasmexec run: error: --output-dir /proc/nope: cannot create it: No such file or directory"
    )
    assert done.stdout == ""  # the run never started


def test_an_output_dir_that_is_a_file_fails_before_the_run(cached: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    done = wasmexec("run", "--output-dir", str(tmp_path / "file"), "-c", "1", cache_dir=cached)
    assert done.returncode == 2 and done.stdout == ""
    assert f"--output-dir {tmp_path / 'file'}" in done.stderr


def test_a_file_that_is_not_utf8_is_a_usage_error(cached: Path, tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_bytes(b"x = '\xff'\n")
    done = wasmexec("run", str(script), cache_dir=cached)
    assert done.returncode == 2 and "not UTF-8" in done.stderr


def test_schema_prints_the_run_result_json_schema() -> None:
    done = wasmexec("schema")
    assert done.returncode == 0
    assert "run_id" in json.loads(done.stdout)["required"]


def test_a_port_out_of_range_is_a_one_line_usage_error_of_serve() -> None:
    done = wasmexec("serve", "--http", "--port", "99999", "--no-audit")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: wasmexec serve")
    assert done.stderr.splitlines()[-1] == "wasmexec serve: error: argument --port: must be at most 65535, got 99999"
    assert "Traceback" not in done.stderr


def test_a_busy_port_is_a_one_line_error_with_its_own_exit_code_and_no_serving_message(cached: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = wasmexec("serve", "--http", "--port", str(port), "--no-audit", cache_dir=cached)
    assert done.returncode == 4, done.stderr
    assert done.stderr.splitlines() == [f"wasmexec: error: cannot listen on 127.0.0.1:{port}: address already in use"]


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["run", "/no/such/file.py"], "usage: wasmexec run"),
        (["run", "--memory-mb", "5000", "-c", "1"], "usage: wasmexec run"),
        (["serve", "--timeout-ms", "0"], "usage: wasmexec serve"),
        (["tools", "search", "x", "--limit", "0"], "usage: wasmexec tools search"),
    ],
)
def test_a_usage_error_in_a_command_prints_that_commands_usage(cached: Path, args: list[str], usage: str) -> None:
    done = wasmexec(*args, cache_dir=cached)
    assert done.returncode == 2
    assert done.stderr.startswith(usage), done.stderr


def test_audit_log_and_no_audit_cannot_be_given_together(tmp_path: Path) -> None:
    done = wasmexec("run", "--audit-log", str(tmp_path / "a.jsonl"), "--no-audit", "-c", "1")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr


def test_limits_above_their_maxima_are_refused_by_the_command_line(cached: Path) -> None:
    done = wasmexec("run", "--memory-mb", str(MAX_MEMORY_MB + 1), "-c", "1", cache_dir=cached)
    assert done.returncode == 2 and f"must be at most {MAX_MEMORY_MB}" in done.stderr


def test_run_writes_its_audit_line_to_the_state_dir_of_this_test_session(cached: Path) -> None:
    """The suite never writes the user's real audit log: tests/conftest.py points XDG_STATE_HOME elsewhere."""
    state = Path(os.environ["XDG_STATE_HOME"])
    assert state.is_relative_to(Path(tempfile.gettempdir())) and not state.is_relative_to(Path.home())
    audit = state / "wasmexec" / "audit.jsonl"
    before = audit.read_text().count("\n") if audit.exists() else 0
    done = wasmexec("run", "-c", "result = 'audited'", cache_dir=cached)
    assert done.returncode == 0
    assert audit.read_text().count("\n") == before + 1
