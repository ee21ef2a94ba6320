"""numpy, pandas and matplotlib inside the science sandbox, with the same run result as the default image."""

from __future__ import annotations

import base64

from wasmexec import Sandbox
from wasmexec._envelope import RunResult


def _data(result: RunResult) -> object:
    assert result["result"]["ok"], result
    return result["result"]["data"]


def test_a_pandas_groupby_returns_its_sums(science: Sandbox) -> None:
    code = """
import pandas as pd
frame = pd.DataFrame({"team": ["a", "b", "a", "c", "b"], "points": [1, 2, 3, 4, 5]})
result = frame.groupby("team")["points"].sum().to_dict()
"""
    assert _data(science.run_sync(code)) == {"a": 4, "b": 7, "c": 4}


def test_numpy_solves_a_linear_system(science: Sandbox) -> None:
    code = """
import numpy as np
a = np.array([[3.0, 1.0], [1.0, 2.0]])
b = np.array([9.0, 8.0])
result = np.linalg.solve(a, b).round(6).tolist()
"""
    assert _data(science.run_sync(code)) == [2.0, 3.0]


def test_a_csv_round_trips_through_stringio(science: Sandbox) -> None:
    code = """
import io
import pandas as pd
buffer = io.StringIO()
pd.DataFrame({"x": [1, 2], "y": ["p", "q"]}).to_csv(buffer, index=False)
text = buffer.getvalue()
back = pd.read_csv(io.StringIO(text))
result = {"csv": text, "rows": back.to_dict(orient="records")}
"""
    assert _data(science.run_sync(code)) == {"csv": "x,y\n1,p\n2,q\n", "rows": [{"x": 1, "y": "p"}, {"x": 2, "y": "q"}]}


def test_matplotlib_renders_a_png_to_bytes(science: Sandbox) -> None:
    code = """
import base64, io
import matplotlib.pyplot as plt
figure, axes = plt.subplots(figsize=(2, 2), dpi=50)
axes.plot([0, 1, 2], [0, 1, 4])
axes.set_title("squares")
buffer = io.BytesIO()
figure.savefig(buffer, format="png")
result = base64.b64encode(buffer.getvalue()).decode()
"""
    png = base64.b64decode(str(_data(science.run_sync(code))))
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 500


def test_numpy_default_integers_are_int32(science: Sandbox) -> None:
    # wasm32: numpy's default integer (C long) is 32 bits, unlike on 64-bit hosts; documented in docs/science.md.
    code = "import numpy as np\nresult = [str(np.array([1]).dtype), int((np.array([2**31 - 1]) + 1)[0])]"
    assert _data(science.run_sync(code)) == ["int32", -(2**31)]


def test_prints_become_logs_and_a_final_expression_is_the_result(science: Sandbox) -> None:
    result = science.run_sync("import numpy as np\nprint('mean', np.mean([1, 2, 3]))\nint(np.sum([1, 2]))")
    assert _data(result) == 3
    assert [entry["message"] for entry in result["logs"]] == ["mean 2.0"]


def test_an_exception_is_reported_with_its_line(science: Sandbox) -> None:
    result = science.run_sync("import numpy as np\n\nnp.linalg.inv(np.zeros((2, 2)))")
    assert not result["result"]["ok"]
    assert result["result"]["error"]["type"] == "LinAlgError"
    assert result["diagnostics"][0]["code"] == "UNCAUGHT_EXCEPTION" and result["diagnostics"][0]["line"] == 3


def test_the_sandbox_image_names_the_science_image(science: Sandbox) -> None:
    result = science.run_sync("1")
    assert result["sandbox_image"] == science.runtime.sandbox_image
    assert result["sandbox_image"].startswith("sha256:") and len(result["sandbox_image"]) == 71


def test_every_run_starts_from_the_pristine_snapshot(science: Sandbox) -> None:
    first = science.run_sync("import numpy as np\nnp.marker = 41\nimport sys\nsys.modules['pandas'].marker = 1\nNone")
    assert first["result"]["ok"], first
    second = science.run_sync("import numpy as np, pandas as pd\n[hasattr(np, 'marker'), hasattr(pd, 'marker')]")
    assert _data(second) == [False, False]


def test_top_level_await_and_asyncio_sleep_work(science: Sandbox) -> None:
    code = "import asyncio, time\nawait asyncio.sleep(0.05)\ntime.sleep(0.01)\nresult = 'awake'"
    assert _data(science.run_sync(code)) == "awake"
