"""A user profile on the science base: a pure-Python package from a local wheel that depends on numpy, and
numpy itself, in one run."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import data_of
from tests.wheels import make_wheel
from wasmexec import Limits, Sandbox
from wasmexec._science.image import ScienceRuntime
from wasmexec._userprofile.profile_build import build_profile

#: Needs numpy, which has no pure-Python wheel: the build leaves it to the science image's own.
FILES = {"numstats/__init__.py": "import numpy as np\n\ndef spread(xs):\n    return float(np.ptp(np.asarray(xs)))\n"}


@pytest.fixture
def science_profile(science_runtime: ScienceRuntime, tmp_path: Path) -> Iterator[Any]:
    """The profile built in the science image's cache dir (its stdlib folder cannot be linked elsewhere),
    and removed from it afterwards."""
    cache = science_runtime.artifacts.directory
    make_wheel(tmp_path / "wheels", "numstats", "0.1", FILES, requires=["numpy>=1.20"])
    (tmp_path / "requirements.txt").write_text("numstats\n")
    try:
        yield build_profile("scitest", tmp_path / "requirements.txt", base="science",
                            find_links=tmp_path / "wheels", cache_dir=cache)  # fmt: skip
    finally:
        for path in cache.glob("profile-scitest*"):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def test_a_profile_on_the_science_base_imports_its_package_and_numpy(science_profile: Any) -> None:
    code = (
        "import numpy, numstats, importlib.util, os\nfrom codemode import discovery\n"
        "names = {p['name'] for p in discovery.packages()}\n"
        "result = [numstats.spread([3, 9, 4]), numpy.__version__ != '', {'numpy', 'numstats'} <= names,"
        " os.path.isfile(numstats.__spec__.cached)]"
    )
    result = Sandbox(Limits(timeout_ms=60_000), runtime=science_profile, spares=0).run_sync(code)
    assert data_of(result) == [6.0, True, True, True]
    assert science_profile.describe().python.startswith("3.15")
