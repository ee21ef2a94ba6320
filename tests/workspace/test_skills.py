"""Skills: *.py under /skills (read-only, the operator's) and /workspace/skills import as skills.<name>."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import data_of
from wasmexec import Limits, Runtime, Sandbox


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    directory = tmp_path / "skills"
    directory.mkdir()
    (directory / "csvtools.py").write_text('"""Read and sum CSV columns.\n\nLonger text."""\ndef total(rows):\n'
                                           "    return sum(rows)\n")  # fmt: skip
    (directory / "broken.py").write_text("def (:\n")
    (directory / "not-a-module.py").write_text('"""skipped: not an identifier"""')
    return directory


def test_an_operator_skill_imports_and_is_listed_with_its_docstring(runtime: Runtime, skills: Path) -> None:
    sandbox = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, skills=skills)
    code = (
        "from codemode import discovery\n"
        "from skills import csvtools\n"
        "result = [csvtools.total([1, 2]), discovery.list_skills()]"
    )
    assert data_of(sandbox.run_sync(code)) == [
        3, [{"name": "broken", "doc": ""}, {"name": "csvtools", "doc": "Read and sum CSV columns."}]
    ]  # fmt: skip


def test_the_skills_directory_is_read_only(runtime: Runtime, skills: Path) -> None:
    sandbox = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, skills=skills)
    code = (
        "import os\n"
        "outcomes = []\n"
        "for attempt in (lambda: open('/skills/csvtools.py', 'a').write('x'),\n"
        "                lambda: open('/skills/new.py', 'w').write('x'),\n"
        "                lambda: os.remove('/skills/csvtools.py'), lambda: os.mkdir('/skills/d'),\n"
        "                lambda: os.rename('/skills/csvtools.py', '/workspace/stolen.py')):\n"
        "    try:\n"
        "        attempt()\n"
        "        outcomes.append('done')\n"
        "    except OSError as exc:\n"
        "        outcomes.append(type(exc).__name__)\n"
        "result = outcomes"
    )
    outcomes = data_of(sandbox.run_sync(code))
    assert "done" not in outcomes
    assert sorted(path.name for path in skills.iterdir()) == ["broken.py", "csvtools.py", "not-a-module.py"]


def test_a_skill_saved_in_the_workspace_imports_in_a_later_run_without_leaving_bytecode(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    save = (
        "import os\nos.makedirs('skills', exist_ok=True)\n"
        "open('skills/double.py', 'w').write('\"\"\"Doubles.\"\"\"\\ndef f(x): return 2 * x\\n')"
    )
    assert [a["path"] for a in sandbox.run_sync(save, workspace=tmp_path)["artifacts"]] == ["skills/double.py"]
    use = "from codemode import discovery\nfrom skills import double\nresult = [double.f(4), discovery.list_skills()]"
    later = sandbox.run_sync(use, workspace=tmp_path)
    assert data_of(later) == [8, [{"name": "double", "doc": "Doubles."}]]
    assert later["artifacts"] == []
    assert not (tmp_path / "skills" / "__pycache__").exists()


def test_without_skills_the_list_is_empty(sandbox: Sandbox) -> None:
    assert data_of(sandbox.run_sync("from codemode import discovery\ndiscovery.list_skills()")) == []
