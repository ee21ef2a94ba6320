"""The run limits hold inside numpy code: deadline, fuel, memory, blocking waits."""

from __future__ import annotations

import tempfile
import time

import pytest

from wasmexec import Limits, Sandbox
from wasmexec._envelope import RunResult
from wasmexec._exceptions import BuildError
from wasmexec._science.image import ScienceRuntime


def _limit(result: RunResult) -> str | None:
    assert not result["result"]["ok"], result
    return next((entry.get("limit") for entry in result["diagnostics"] if entry["code"] == "SANDBOX_LIMIT"), None)


def test_the_deadline_stops_a_long_numpy_operation(science: Sandbox) -> None:
    code = "import numpy as np\nm = np.random.rand(400, 400)\nwhile True:\n    m = np.linalg.inv(m @ m.T + np.eye(400))"
    started = time.monotonic()
    result = science.run_sync(code, Limits(timeout_ms=1_000))
    assert _limit(result) == "timeout"
    assert result["result"]["error"]["retryable"] is True
    assert time.monotonic() - started < 15  # stopped, not run to some natural end


def test_fuel_runs_out_inside_numpy(science: Sandbox) -> None:
    code = "import numpy as np\nresult = float(np.linalg.svd(np.random.rand(300, 300))[1].sum())"
    assert _limit(science.run_sync(code, Limits(fuel=20_000_000))) == "fuel"


def test_memory_limit_holds_inside_numpy(science: Sandbox) -> None:
    result = science.run_sync("import numpy as np\nresult = float(np.ones(50_000_000).sum())", Limits(memory_mb=128))
    assert _limit(result) == "memory"


def test_a_memory_limit_below_the_snapshot_is_a_memory_limit_error(science: Sandbox) -> None:
    result = science.run_sync("1", Limits(memory_mb=32))
    assert _limit(result) == "memory"


def test_a_blocking_wasi_wait_is_refused(science: Sandbox) -> None:
    # The re-imported time module's sleep bypasses the host's wait: poll_oneoff traps the run.
    code = "import sys\ndel sys.modules['time']\nimport time\ntime.sleep(2.5)\nresult = 'slept'"
    result = science.run_sync(code)
    assert not result["result"]["ok"]
    assert [entry["code"] for entry in result["diagnostics"]] == ["BLOCKING_WAIT"], result


def test_a_run_without_a_built_image_fails_fast_naming_the_build_command() -> None:
    with tempfile.TemporaryDirectory() as empty:
        sandbox = Sandbox(runtime=ScienceRuntime(empty), profile="science")
        started = time.monotonic()
        with pytest.raises(BuildError, match="wasmexec build --profile science"):
            sandbox.run_sync("1")
        assert time.monotonic() - started < 5


def test_an_unknown_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown profile 'sciences'"):
        Sandbox(profile="sciences")
