"""Files: the sandbox sees only its private /workspace and /tmp, so no host file can be read or written.

The science image sees one host directory more, its stdlib, read-only (test_science_surface.py).
(The escapes through the workspace itself, symlinks, hard links, renames, are in test_workspace_escapes.py.)"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from tests.helpers import data_of, diagnostic, error_of
from tests.security._support import assert_host_survives, profile_of, run
from wasmexec import Runtime, Sandbox


def test_reading_etc_passwd_fails_inside_the_sandbox(sandbox: Sandbox, runtime: Runtime) -> None:
    result = sandbox.run_sync("open('/etc/passwd').read()")
    error = error_of(result)
    assert error["type"] == "FileNotFoundError"
    assert "root:" not in str(result)
    assert diagnostic(result, "UNCAUGHT_EXCEPTION")["error_class"] == "FileNotFoundError"
    assert_host_survives(runtime)


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.open('/etc/passwd', os.O_RDONLY)",
        "import pathlib\npathlib.Path('/etc/passwd').read_text()",
        "import io\nio.FileIO('/etc/passwd').read()",
        "open('/etc/hostname', 'rb').read()",
        "open('/proc/self/environ', 'rb').read()",
        "open('/proc/self/maps').read()",
        "open('/dev/urandom', 'rb').read(4)",
    ],
)
def test_every_way_of_opening_a_host_file_fails(runtime: Runtime, code: str) -> None:
    error = error_of(run(runtime, code))
    assert error["type"] == "FileNotFoundError", error
    assert_host_survives(runtime)


def test_listing_the_root_directory_fails_inside_the_sandbox(sandbox: Sandbox, runtime: Runtime) -> None:
    assert error_of(sandbox.run_sync("import os\nos.listdir('/')"))["type"] == "FileNotFoundError"
    assert error_of(sandbox.run_sync("import os\nlist(os.scandir('..'))"))["type"] == "PermissionError"
    assert_host_survives(runtime)


def test_no_host_path_exists_from_inside_the_sandbox(sandbox: Sandbox) -> None:
    paths = ["/", "/etc", "/proc", "/home", "/root", "/dev", "/var/tmp", os.getcwd(), str(Path.home())]
    code = f"import os\n[os.path.exists(p) for p in {paths!r}]"
    assert data_of(sandbox.run_sync(code)) == [False] * len(paths)


def test_the_only_directories_are_the_runs_own_empty_workspace_and_tmp(sandbox: Sandbox) -> None:
    code = "import os\n[os.getcwd(), os.listdir('.'), os.listdir('/workspace'), os.listdir('/tmp')]"
    assert data_of(sandbox.run_sync(code)) == ["/workspace", [], [], []]


def test_the_interpreters_own_files_are_not_readable_either(sandbox: Sandbox, runtime: Runtime) -> None:
    # sys.path names the directories the interpreter was built from; none is mounted at run time, except
    # the science image's stdlib zip (it imports from it at run time; mounted read-only, see
    # test_science_surface.py).
    code = (
        "import os, sys\n"
        "[p for p in sys.path if os.path.exists(p)] + "
        "[p for p in ('/python', '/0', '/0/app.py', '/bundled') if os.path.exists(p)]"
    )
    expected = ["/usr/local/lib/python315.zip"] if profile_of(runtime) == "science" else []
    assert data_of(sandbox.run_sync(code)) == expected


def test_writing_a_file_in_tmp_writes_the_runs_own_tmp_not_the_hosts(sandbox: Sandbox, runtime: Runtime) -> None:
    name = f"/tmp/wasmexec-breakout-{uuid.uuid4().hex}"
    code = (
        "outcomes = []\n"
        f"for attempt in (lambda: open({name!r}, 'w').write('pwned'),\n"
        f"                lambda: __import__('os').open({name!r}, 0o101, 0o644),\n"
        f"                lambda: __import__('pathlib').Path({name!r}).write_bytes(b'pwned')):\n"
        "    try:\n"
        "        attempt()\n"
        "        outcomes.append('written')\n"
        "    except OSError as exc:\n"
        "        outcomes.append(type(exc).__name__)\n"
        "result = outcomes"
    )
    outcomes = data_of(sandbox.run_sync(code))
    assert outcomes[0] == outcomes[2] == "written"  # (the raw os.open flags are Linux's, not WASI's)
    assert not Path(name).exists()
    assert_host_survives(runtime)


def test_writing_to_a_host_directory_given_by_absolute_path_leaves_nothing(
    sandbox: Sandbox, runtime: Runtime, tmp_path: Path
) -> None:
    target = tmp_path / "escaped.txt"
    result = sandbox.run_sync(f"open({str(target)!r}, 'w').write('pwned')")
    assert error_of(result)["type"] == "FileNotFoundError"
    assert list(tmp_path.iterdir()) == []
    assert_host_survives(runtime)


def test_a_relative_path_write_lands_in_the_workspace_only(sandbox: Sandbox, runtime: Runtime) -> None:
    name = f"wasmexec-relative-{uuid.uuid4().hex}.txt"
    result = sandbox.run_sync(f"open({name!r}, 'w').write('pwned')")
    assert data_of(result) == 5
    assert [artifact["path"] for artifact in result["artifacts"]] == [name]
    for directory in (Path.cwd(), Path("/tmp"), Path.home(), Path("/")):
        assert not (directory / name).exists()
    assert_host_survives(runtime)


def test_making_directories_and_symlinks_outside_the_workspace_fails(sandbox: Sandbox) -> None:
    code = (
        "import os\n"
        "outcomes = []\n"
        "for attempt in (lambda: os.mkdir('/etc/wasmexec-dir'), lambda: os.makedirs('../a/b/c'),\n"
        "                lambda: os.symlink('/etc/passwd', 'link'), lambda: os.chdir('/etc'),\n"
        "                lambda: os.chdir('..')):\n"
        "    try:\n"
        "        attempt()\n"
        "        outcomes.append('done')\n"
        "    except OSError as exc:\n"
        "        outcomes.append(type(exc).__name__)\n"
        "result = outcomes"
    )
    assert "done" not in data_of(sandbox.run_sync(code))


def test_the_working_directory_is_not_the_hosts(sandbox: Sandbox) -> None:
    cwd = data_of(sandbox.run_sync("import os\nos.getcwd()"))
    assert cwd == "/workspace"
    assert cwd != os.getcwd()
    host_cwd = os.getcwd()
    assert error_of(sandbox.run_sync(f"import os\nos.listdir({host_cwd!r})"))["type"] == "FileNotFoundError"
