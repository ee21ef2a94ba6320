"""Processes, threads and native code: none can be started or loaded."""

from __future__ import annotations

import pytest

from tests.helpers import data_of, diagnostic, error_of
from tests.security._support import IMPORT_ERRORS, UNBLOCK_IMPORTS, assert_host_survives, run
from wasmexec import Runtime


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess\nsubprocess.run(['id'])",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
        "import concurrent.futures.process",
        "import ctypes\nctypes.CDLL(None).system(b'id')",
        "import pty",
        "import mmap",
    ],
)
def test_process_and_native_modules_fail_to_import_with_a_hint(runtime: Runtime, code: str) -> None:
    result = run(runtime, code)
    assert error_of(result)["type"] in IMPORT_ERRORS
    assert diagnostic(result, "IMPORT_FAILURE")["hint"].strip()
    assert_host_survives(runtime)


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.system('id')",
        "import os\nos.fork()",
        "import os\nos.popen('id').read()",
        "import os\nos.execv('/bin/sh', ['sh'])",
        "import os\nos.spawnv(os.P_WAIT, '/bin/sh', ['sh'])",
        "import os\nos.posix_spawn('/bin/sh', ['sh'], {})",
        "import os\nos.kill(1, 9)",
        "import threading\nthreading.Thread(target=print).start()",
        "import _thread\n_thread.start_new_thread(print, ())",
        "import concurrent.futures\nconcurrent.futures.ThreadPoolExecutor().submit(print).result()",
    ],
)
def test_starting_a_process_or_thread_fails_clearly(runtime: Runtime, code: str) -> None:
    result = run(runtime, code)
    error = error_of(result)
    # Whatever the failure is, it is an ordinary Python exception (a missing function, a blocked
    # import, "can't start new thread"), not a crash of the interpreter.
    assert error["type"] in IMPORT_ERRORS | {"AttributeError", "RuntimeError", "OSError", "PermissionError"}, result
    assert error["message"]
    assert_host_survives(runtime)


def test_the_os_module_has_no_process_functions(runtime: Runtime) -> None:
    names = ["system", "fork", "forkpty", "execv", "execve", "spawnv", "posix_spawn", "kill", "killpg", "wait"]
    assert data_of(run(runtime, f"import os\n[n for n in {names!r} if hasattr(os, n)]")) == []


def test_process_and_native_modules_are_absent_even_without_the_import_blocker(runtime: Runtime) -> None:
    names = ["_posixsubprocess", "subprocess", "multiprocessing", "_multiprocessing", "ctypes", "_ctypes", "mmap"]
    code = (
        UNBLOCK_IMPORTS + "found = []\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        __import__(name)\n"
        "        found.append(name)\n"
        "    except ImportError:\n"
        "        pass\n"
        "result = found"
    )
    assert data_of(run(runtime, code)) == []
    assert_host_survives(runtime)
