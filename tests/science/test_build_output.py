"""`wasmexec build --profile science --output DIR` writes a science cache an operator can ship: pointed at
with --cache-dir, it runs numpy code without building, compiling or writing anything there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import data_of
from tests.integration.conftest import child_env
from wasmexec._science.image import ScienceRuntime


def _wasmexec(*arguments: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmexec", *arguments], env=child_env(**env),
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def _listing(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(path.relative_to(directory)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in directory.rglob("*")}  # fmt: skip


@pytest.fixture(scope="module")
def shipped(science_runtime: ScienceRuntime, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("shipped") / "science-cache"
    done = _wasmexec("build", "--profile", "science", "--output", str(output),
                     WASMEXEC_CACHE_DIR=str(science_runtime.artifacts.directory))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"run with --cache-dir {output}" in done.stderr
    return output


def test_the_output_holds_the_snapshot_both_compiled_forms_and_the_stdlib_folder(
    shipped: Path, science_runtime: ScienceRuntime
) -> None:
    short = science_runtime.sandbox_image.removeprefix("sha256:")[:32]
    names = set(os.listdir(shipped))
    assert {f"science-{short}.json", f"science-{short}.wasm"} <= names
    assert len([name for name in names if name.startswith(f"science-{short}-") and name.endswith(".cwasm")]) == 2
    stdlib = next(shipped.glob("science-stdlib-*"))
    assert (stdlib / "complete").is_file() and (stdlib / "lib" / "python315.zip").is_file()


def test_a_run_with_the_shipped_directory_as_cache_builds_and_writes_nothing(shipped: Path, tmp_path: Path) -> None:
    before = _listing(shipped)
    code = "import numpy as np, pandas as pd\nresult = int(pd.DataFrame({'a': np.arange(5)})['a'].sum())"
    done = _wasmexec("run", "--profile", "science", "--no-audit", "--cache-dir", str(shipped), "-c", code,
                     XDG_CACHE_HOME=str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert data_of(json.loads(done.stdout)) == 10
    assert "compil" not in done.stderr and "build" not in done.stderr
    assert _listing(shipped) == before  # no lock file, no new compiled form
