"""A user profile's packages, attacked: the guest cannot change them, other profiles never see them, a
package cannot shadow the standard library, and a wheel cannot write outside its tree at build time.

The break-outs of the whole suite run on the base images (`runtime`); a user profile adds only its
read-only package tree, so the smoke subset here checks that tree and repeats a few break-outs on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import data_of
from tests.security._support import assert_host_survives, attempts_code, run
from tests.wheels import linked_cache, make_wheel
from wasmexec import BuildError, Runtime
from wasmexec._userprofile.profile_build import build_profile

#: A package that tries to shadow a stdlib module and codemode, next to a plain one.
FILES = {"plain/__init__.py": "VALUE = 41\n", "json.py": "HIJACKED = True\n", "codemode.py": "HIJACKED = True\n"}


@pytest.fixture(scope="module")
def user_runtime(runtime: Runtime, tmp_path_factory: pytest.TempPathFactory) -> Any:
    if getattr(runtime, "profile", "default") != "default":
        pytest.skip("the user profile here is built on the default image")
    root = tmp_path_factory.mktemp("user-profile")
    cache = linked_cache(runtime.artifacts.directory, runtime.sandbox_image, root / "cache")
    make_wheel(root / "wheels", "plain", "1.0", FILES)
    (root / "requirements.txt").write_text("plain\n")
    return build_profile("attacked", root / "requirements.txt", find_links=root / "wheels", cache_dir=cache)


def test_the_guest_cannot_change_the_profile_packages(user_runtime: Any) -> None:
    attempts = {
        "overwrite": "open('/packages/plain/__init__.py', 'w').write('VALUE = 0')",
        "append": "open('/packages/plain/__init__.py', 'a').write('VALUE = 0')",
        "create": "open('/packages/evil.py', 'w').write('x = 1')",
        "remove": "import os; os.remove('/packages/plain/__init__.py')",
        "mkdir": "import os; os.mkdir('/packages/new')",
        "rename": "import os; os.rename('/packages/plain', '/packages/other')",
    }
    outcome = data_of(run(user_runtime, attempts_code(attempts)))
    assert all(value != "done" for value in outcome.values()), outcome
    assert data_of(run(user_runtime, "import plain\nresult = plain.VALUE")) == 41
    assert_host_survives(user_runtime)


def test_a_package_cannot_shadow_the_standard_library_or_codemode(user_runtime: Any) -> None:
    code = "import json, codemode\nresult = [hasattr(json, 'HIJACKED'), hasattr(codemode, 'HIJACKED')]"
    assert data_of(run(user_runtime, code)) == [False, False]


def test_another_profile_never_sees_the_packages(user_runtime: Any, runtime: Runtime) -> None:
    code = attempts_code({"import": "import plain", "listdir": "import os; os.listdir('/packages')"})
    assert data_of(run(runtime, code)) == {"import": "ModuleNotFoundError", "listdir": "FileNotFoundError"}


def test_what_one_run_does_to_its_modules_does_not_reach_the_next(user_runtime: Any) -> None:
    run(user_runtime, "import plain\nplain.VALUE = 0\nimport sys\nsys.path.insert(0, '/packages/plain')")
    assert data_of(run(user_runtime, "import plain, sys\nresult = [plain.VALUE, sys.path.count('/packages')]")) == [
        41, 1]  # fmt: skip


@pytest.mark.parametrize("member", ["../escape.py", "/abs.py", "a/../../escape.py"])
def test_a_wheel_whose_file_would_land_outside_the_tree_is_refused(
    runtime: Runtime, tmp_path: Path, member: str
) -> None:
    if getattr(runtime, "profile", "default") != "default":
        pytest.skip("the user profile here is built on the default image")
    cache = linked_cache(runtime.artifacts.directory, runtime.sandbox_image, tmp_path / "cache")
    make_wheel(tmp_path / "wheels", "traversal", "1.0", {"traversal/__init__.py": "", member: "x = 1\n"})
    (tmp_path / "requirements.txt").write_text("traversal\n")
    with pytest.raises(BuildError, match="would land outside its folder"):
        build_profile("traversal", tmp_path / "requirements.txt", find_links=tmp_path / "wheels", cache_dir=cache)
    assert not (tmp_path / "escape.py").exists() and not (cache / "escape.py").exists()
