"""`wasmexec run --file … --output-dir …` as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wasmexec import Runtime, validate_run_result

SUMMARIZE = """
import csv, statistics
rows = list(csv.DictReader(open("data/temps.csv")))
mean = statistics.mean(float(r["temp"]) for r in rows)
with open("summary.csv", "w", newline="") as out:
    csv.writer(out).writerows([["rows", "mean_temp"], [len(rows), mean]])
result = {"rows": len(rows), "mean_temp": mean}
"""


@pytest.fixture
def run(runtime: Runtime, tmp_path: Path) -> Any:
    def wasmexec(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
        env = {**os.environ, "WASMEXEC_CACHE_DIR": str(runtime.artifacts.directory)}
        done = subprocess.run([sys.executable, "-m", "wasmexec", "run", "--no-audit", *args], capture_output=True,
                              text=True, timeout=120, env=env, cwd=tmp_path, check=False)  # fmt: skip
        result = json.loads(done.stdout) if done.stdout.strip() else None
        if result is not None:
            validate_run_result(result)
        return done, result

    return wasmexec


def test_a_csv_given_with_file_is_summarized_and_the_result_file_lands_in_the_output_dir(
    run: Any, tmp_path: Path
) -> None:
    (tmp_path / "temps.csv").write_text("city,temp\nOslo,3\nRome,15\nLima,18\n")
    (tmp_path / "summarize.py").write_text(SUMMARIZE)
    done, result = run("summarize.py", "--file", "temps.csv:data/temps.csv", "--output-dir", "out")
    assert done.returncode == 0, done.stderr
    assert result["result"]["data"] == {"rows": 3, "mean_temp": 12.0}
    assert [artifact["path"] for artifact in result["artifacts"]] == ["summary.csv"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.csv"]
    assert (tmp_path / "out" / "summary.csv").read_text() == "rows,mean_temp\n3,12.0\n"


def test_file_without_a_path_uses_the_files_name(run: Any, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("hi")
    done, result = run("-c", "open('in.txt').read()", "--file", str(tmp_path / "in.txt"))
    assert result["result"]["data"] == "hi", done.stderr


def test_the_output_dir_is_never_overwritten_and_never_left_through_a_planted_symlink(run: Any, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "exists.txt").write_text("mine")
    (out / "link.txt").symlink_to(victim / "pwned.txt")
    (out / "sub").symlink_to(victim)
    code = (
        "import os\nos.makedirs('sub', exist_ok=True)\n"
        "for name in ('exists.txt', 'link.txt', 'sub/x.txt', 'ok.txt'):\n"
        "    open(name, 'w').write('guest')"
    )
    done, result = run("-c", code, "--output-dir", str(out))
    assert done.returncode == 0
    assert len(result["artifacts"]) == 4
    assert (out / "exists.txt").read_text() == "mine"
    assert (out / "ok.txt").read_text() == "guest"
    assert list(victim.iterdir()) == []
    assert done.stderr.count("warning:") == 3


def test_workspace_dir_keeps_files_between_runs(run: Any, tmp_path: Path) -> None:
    run("-c", "open('state.txt', 'w').write('1')", "--workspace", "ws")
    done, result = run("-c", "open('state.txt').read()", "--workspace", "ws")
    assert result["result"]["data"] == "1", done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--file", "missing.csv"], "missing.csv is not a readable file"),
        (["--file", "in.txt:../up.txt"], "'..'"),
        (["--file", "in.txt:/abs.txt"], "must be relative"),
        (["--skills", "nowhere"], "not a directory"),
        (["--workspace-mb", "-1"], "must be at least 0"),
    ],
)
def test_bad_file_options_are_usage_errors(run: Any, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "in.txt").write_text("x")
    done, result = run("-c", "1", *args)
    assert done.returncode == 2
    assert result is None
    assert message in done.stderr


def test_workspace_limits_apply_from_the_command_line(run: Any) -> None:
    done, result = run("-c", "open('big', 'wb').write(b'x' * 2_000_000)", "--workspace-mb", "1")
    assert done.returncode == 1
    assert result["diagnostics"][-1]["limit"] == "workspace_bytes"
