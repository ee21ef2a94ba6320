"""`wasmexec run --profile science` prints the run result line; without a built image it fails fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from wasmexec._science.image import ScienceRuntime


def _wasmexec(*args: str, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WASMEXEC_CACHE_DIR": str(cache_dir)}
    command = [sys.executable, "-m", "wasmexec", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_run_with_the_science_profile_prints_one_result_line(science_runtime: ScienceRuntime) -> None:
    code = "import pandas as pd\nresult = pd.Series([1, 2, 3]).mean()"
    completed = _wasmexec("run", "--profile", "science", "-c", code, cache_dir=science_runtime.artifacts.directory)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["result"]["data"] == 2.0
    assert result["sandbox_image"] == science_runtime.sandbox_image


def test_run_without_a_built_science_image_exits_3_naming_the_build_command(tmp_path: Path) -> None:
    completed = _wasmexec("run", "--profile", "science", "-c", "1", cache_dir=tmp_path)
    assert completed.returncode == 3
    assert "wasmexec build --profile science" in completed.stderr
    assert completed.stdout == ""
