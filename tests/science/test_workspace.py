"""The science profile's runs have the same /workspace, /tmp and /skills as the default image's:
files in, artifacts out, the same quota, the same walls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import data_of
from wasmexec import Limits, Sandbox
from wasmexec._science.image import ScienceRuntime

CSV = "city,temp\nOslo,3\nRome,18\nOslo,5\n"


def test_pandas_reads_a_csv_given_as_an_input_file(science: Sandbox) -> None:
    code = "import pandas as pd\ndf = pd.read_csv('data.csv')\nresult = df.groupby('city')['temp'].mean().to_dict()"
    result = science.run_sync(code, files={"data.csv": CSV})
    assert data_of(result) == {"Oslo": 4.0, "Rome": 18.0}
    assert result["artifacts"] == []  # an input the code did not change is no artifact


def test_a_matplotlib_chart_saved_to_the_workspace_is_an_artifact(science: Sandbox) -> None:
    code = (
        "import matplotlib.pyplot as plt\nimport os\n"
        "plt.plot([1, 2, 3], [3, 1, 2])\nplt.savefig('/workspace/chart.png')\n"
        "result = os.getcwd()"
    )
    result = science.run_sync(code)
    assert data_of(result) == "/workspace"
    [artifact] = result["artifacts"]
    assert (artifact["path"], artifact["mime_type"]) == ("chart.png", "image/png")
    assert science.read_artifact(result, "chart.png").startswith(b"\x89PNG\r\n\x1a\n")


def test_numpy_save_writes_to_the_workspace(science: Sandbox) -> None:
    # ndarray.tofile fails here with ENOTSUP (it dups the descriptor); np.save writes through the file object.
    code = "import numpy as np\nnp.save('a.npy', np.arange(3))\nresult = np.load('a.npy').tolist()"
    result = science.run_sync(code)
    assert data_of(result) == [0, 1, 2]
    assert [artifact["path"] for artifact in result["artifacts"]] == ["a.npy"]


def test_tmp_is_writable_and_not_an_artifact(science: Sandbox) -> None:
    code = "import tempfile\nf = tempfile.NamedTemporaryFile('w', delete=False)\nf.write('x')\nresult = f.name"
    result = science.run_sync(code)
    assert data_of(result).startswith("/tmp/")
    assert result["artifacts"] == []


def test_writing_past_the_workspace_quota_fails_with_the_limit(science: Sandbox) -> None:
    code = "import numpy as np, pandas as pd\npd.DataFrame({'a': np.arange(400_000)}).to_csv('big.csv')\nresult = 1"
    result = science.run_sync(code, Limits(timeout_ms=20_000, workspace_mb=1))
    assert result["result"]["error"]["type"] == "SandboxLimitError"
    assert result["diagnostics"][-1]["limit"] == "workspace_bytes"
    assert result["artifacts"] == []


def test_inputs_over_the_quota_do_not_run(science: Sandbox) -> None:
    result = science.run_sync("result = 1", Limits(timeout_ms=20_000, workspace_files=1),
                              files={"a.txt": "a", "b.txt": "b"})  # fmt: skip
    assert result["diagnostics"][-1]["limit"] == "workspace_files"


@pytest.mark.parametrize(
    "attempt",
    [
        "open('../secret.txt').read()",
        "import os\nos.symlink('../secret.txt', 'rel')\nopen('rel').read()",
        "import os\nos.symlink('..', 'up')\nos.listdir('up')",
        "import pandas as pd\npd.read_csv('/workspace/../secret.txt')",
        "open('/tmp/../secret.txt').read()",
        "open('/usr/local/lib/../../../etc/passwd').read()",
    ],
)
def test_ways_out_of_the_workspace_fail(science: Sandbox, tmp_path: Path, attempt: str) -> None:
    (tmp_path / "secret.txt").write_text("top secret")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result = science.run_sync(attempt, workspace=workspace)
    assert not result["result"]["ok"], result["result"]
    assert result["result"]["error"]["type"] in {"PermissionError", "FileNotFoundError", "OSError"}, result["result"]
    assert "top secret" not in json.dumps(result) and "root:" not in json.dumps(result)
    assert sorted(os.listdir(tmp_path)) == ["secret.txt", "ws"]


def test_the_stdlib_and_matplotlib_data_are_read_only(science: Sandbox) -> None:
    code = "open('/usr/local/lib/planted.py', 'w').write('x')"
    result = science.run_sync(code)
    assert result["result"]["error"]["type"] in {"PermissionError", "OSError"}, result["result"]


def test_skills_are_importable_from_skills_and_the_workspace(science: Sandbox, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "stats.py").write_text('"""Column means."""\ndef means(df):\n    return df.mean().to_dict()\n')
    code = (
        "import pandas as pd\nfrom skills import stats, mine\n"
        "result = [stats.means(pd.DataFrame({'a': [1, 3]})), mine.VALUE]"
    )
    result = science.run_sync(code, skills=skills, files={"skills/mine.py": "VALUE = 7\n"})
    assert data_of(result) == [{"a": 2.0}, 7]


def test_an_in_place_workspace_keeps_what_the_run_wrote(science: Sandbox, tmp_path: Path) -> None:
    code = "import pandas as pd\npd.DataFrame({'a': [1, 2]}).to_csv('out.csv', index=False)"
    result = science.run_sync(code, workspace=tmp_path)
    assert result["result"]["ok"], result["result"]
    assert (tmp_path / "out.csv").read_text() == "a\n1\n2\n"


def test_the_cli_runs_a_file_and_writes_the_chart_to_the_output_dir(
    science_runtime: ScienceRuntime, tmp_path: Path
) -> None:
    (tmp_path / "data.csv").write_text(CSV)
    code = (
        "import pandas as pd, matplotlib.pyplot as plt\ndf = pd.read_csv('data.csv')\n"
        "df.plot.bar(x='city', y='temp').figure.savefig('chart.png')\nresult = len(df)"
    )
    env = {**os.environ, "WASMEXEC_CACHE_DIR": str(science_runtime.artifacts.directory)}
    command = [sys.executable, "-m", "wasmexec", "run", "--profile", "science", "--file", str(tmp_path / "data.csv"),
               "--output-dir", str(tmp_path / "out"), "-c", code]  # fmt: skip
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr + completed.stdout
    result = json.loads(completed.stdout)
    assert result["result"]["data"] == 3
    assert [artifact["path"] for artifact in result["artifacts"]] == ["chart.png"]
    assert (tmp_path / "out" / "chart.png").read_bytes().startswith(b"\x89PNG")
