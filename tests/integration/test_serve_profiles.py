"""`wasmexec serve --profile …` starts only with every profile it offers ready: it never builds the science
image behind a client's back, and says what to run instead. (Serving both: tests/science/test_serve.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import child_env
from wasmexec._science import upstream


def _serve(*arguments: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wasmexec", "serve", "--no-audit", *arguments],
        env=child_env(WASMEXEC_CACHE_DIR=str(cache)), stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_serving_an_unbuilt_science_profile_fails_at_startup_saying_how_to_build_it(tmp_path: Path) -> None:
    for profiles in (["--profile", "science"], ["--profile", "default,science"]):
        done = _serve(*profiles, cache=tmp_path)
        assert done.returncode == 3, done.stderr
        assert "cannot serve the science profile" in done.stderr
        assert "`wasmexec build --profile science`" in done.stderr
        if not upstream.installed():
            assert 'pip install "wasmexec[science]"' in done.stderr
        assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("guest-*")), "the default image was built although the server could not start"


def test_an_unknown_profile_is_a_usage_error(tmp_path: Path) -> None:
    done = _serve("--profile", "default,scipy", cache=tmp_path)
    assert done.returncode == 2
    assert "unknown profile 'scipy'; the profiles are default, science" in done.stderr
