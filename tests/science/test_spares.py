"""Warm spares of the science image: a run on one sees a fresh snapshot, and nothing of another run."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from tests.helpers import data_of
from tests.integration.test_spares import PROBE
from wasmexec import Limits, Sandbox
from wasmexec._sandbox.spares import SpareKey
from wasmexec._science.image import ScienceRuntime

LIMITS = Limits(timeout_ms=20_000)


@pytest.fixture
def spared(science_runtime: ScienceRuntime) -> Iterator[Sandbox]:
    sandbox = Sandbox(LIMITS, runtime=science_runtime, profile="science", spares=1)
    yield sandbox
    sandbox.close()


def _ready(sandbox: Sandbox) -> None:
    key = SpareKey(LIMITS.fuel is not None, LIMITS.memory_bytes, True, None)
    sandbox.spares.fill(key)
    assert sandbox.spares.wait_ready(key, 60), sandbox.spares.stats()


def test_a_run_on_a_spare_sees_what_a_fresh_snapshot_shows(science_runtime: ScienceRuntime, spared: Sandbox) -> None:
    fresh = Sandbox(LIMITS, runtime=science_runtime, profile="science", spares=0)
    _ready(spared)
    on_spare = data_of(spared.run_sync(PROBE))
    assert spared.spares.stats().hits == 1
    assert on_spare == data_of(fresh.run_sync(PROBE))
    assert on_spare["dummy_namespaces"] == 0


def test_nothing_of_one_science_run_reaches_the_next(spared: Sandbox) -> None:
    first = textwrap.dedent("""
        import numpy as np, pandas as pd
        np.MARK = 1
        pd.options.display.max_rows = 3
        open("/workspace/left.csv", "w").write("a\\n1\\n")
        print("printed by the first run")
    """)
    second = textwrap.dedent("""
        import numpy as np, os, pandas as pd
        result = [hasattr(np, "MARK"), pd.options.display.max_rows, os.listdir("/workspace"), os.listdir("/tmp")]
    """)
    _ready(spared)
    assert spared.run_sync(first)["result"]["ok"]
    _ready(spared)
    result = spared.run_sync(second)
    assert data_of(result) == [False, 60, [], []]
    assert result["logs"] == []
    assert spared.spares.stats().hits == 2


def test_a_spare_reads_the_runs_csv_and_returns_its_chart(spared: Sandbox) -> None:
    _ready(spared)
    code = (
        "import pandas as pd, matplotlib.pyplot as plt\ndf = pd.read_csv('data.csv')\n"
        "df.plot(x='x', y='y').figure.savefig('chart.png')\nresult = float(df['y'].sum())"
    )
    result = spared.run_sync(code, files={"data.csv": "x,y\n1,2\n2,5\n"})
    assert data_of(result) == 7.0
    assert spared.spares.stats().hits == 1
    assert [artifact["path"] for artifact in result["artifacts"]] == ["chart.png"]


def test_a_spare_keeps_nothing_of_its_numpy_and_pandas_warm_up(spared: Sandbox) -> None:
    # A science spare's warm-up also runs numpy and pandas (so their pages are touched before the run).
    code = (
        "import gc, linecache, numpy as np, pandas as pd\n"
        "result = [sorted(linecache.cache), sorted(getattr(linecache, '_interactive_cache', {})),\n"
        "          len([o for o in gc.get_objects() if isinstance(o, (pd.DataFrame, pd.Series))])]"
    )
    _ready(spared)
    assert data_of(spared.run_sync(code)) == [["<sandbox>"], [], 0]
    assert spared.spares.stats().hits == 1


def test_numpys_random_numbers_differ_between_runs_on_spares(spared: Sandbox) -> None:
    code = "import numpy as np\nresult = int(np.random.randint(2**31 - 1))"
    numbers = []
    for _ in range(2):
        _ready(spared)
        numbers.append(data_of(spared.run_sync(code)))
    assert numbers[0] != numbers[1]
    assert spared.spares.stats().hits == 2
