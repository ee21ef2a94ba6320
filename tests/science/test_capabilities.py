"""numpy and pandas load ctypes and subprocess; agent code imports them too and still reaches no host capability."""

from __future__ import annotations

import pytest

from wasmexec import Sandbox


def _error(science: Sandbox, code: str) -> tuple[str, str]:
    result = science.run_sync(code)
    assert not result["result"]["ok"], result
    return result["result"]["error"]["type"], result["diagnostics"][0]["code"]


@pytest.mark.parametrize(
    "code",
    [
        "import ctypes\nctypes.CDLL(None).system(b'id')",
        "import subprocess\nsubprocess.run(['id'])",
        "import socket\nsocket.create_connection(('127.0.0.1', 80))",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
        "import _ctypes",
    ],
)
def test_agent_code_imports_what_numpy_and_pandas_loaded_and_its_use_fails(science: Sandbox, code: str) -> None:
    # Nothing is refused at import (the walls are WASI's): the use fails with an exception of the code.
    error, found = _error(science, f"import numpy, pandas\n{code}")
    assert error not in {"SandboxError", "SandboxLimitError"}
    assert found in {"UNCAUGHT_EXCEPTION", "IMPORT_FAILURE"}


def test_ctypes_and_subprocess_reached_through_numpy_and_pandas_do_nothing(science: Sandbox) -> None:
    # numpy and pandas keep their own references to ctypes and subprocess (loaded before the blocks):
    # reached that way, ctypes cannot load or call native code and subprocess cannot start a process.
    code = """
import sys
ctypes = sys.modules["numpy._core._internal"].ctypes
subprocess = sys.modules["asyncio.subprocess"].subprocess
attempts = [
    lambda: ctypes.CDLL(None).system(b"echo hi"),
    lambda: ctypes.CDLL("libc.so.6"),
    lambda: ctypes.string_at(16, 4),
    lambda: subprocess.run(["ls", "/"], capture_output=True),
    lambda: subprocess.Popen(["/bin/sh", "-c", "echo hi"]),
]
outcomes = []
for attempt in attempts:
    try:
        outcomes.append("worked: " + repr(attempt()))
    except Exception as exc:
        outcomes.append(type(exc).__name__)
result = outcomes
"""
    result = science.run_sync(code)
    assert result["result"]["ok"], result
    assert not [outcome for outcome in result["result"]["data"] if outcome.startswith("worked")], result


def test_the_filesystem_holds_only_the_read_only_stdlib(science: Sandbox) -> None:
    code = """
import os
found = {}
for path in ["/", "/etc/passwd", "/tmp", "/root", "/usr/local/lib"]:
    try:
        found[path] = sorted(os.listdir(path))[:5] if os.path.isdir(path) else open(path).read(10)
    except OSError as exc:
        found[path] = type(exc).__name__
try:
    open("/usr/local/lib/evil.txt", "w").write("x")
    found["write"] = "written"
except OSError as exc:
    found["write"] = type(exc).__name__
result = [found, dict(os.environ)]
"""
    result = science.run_sync(code)
    assert result["result"]["ok"], result
    found, environ = result["result"]["data"]
    assert found["/etc/passwd"] != found["/etc/passwd"][:0] and "root:" not in str(found["/etc/passwd"])
    assert found["/usr/local/lib"] == ["python315.zip"]
    assert found["write"] != "written"
    assert environ == {}


def test_the_raw_door_answers_garbage_with_an_error_value(science: Sandbox) -> None:
    code = """
import _host, json
answers = [json.loads(_host.call(request)) for request in
           [b"not json", b'{"op": "nope"}', b'{"op": "wait", "args": [["x"], 5]}', b'{"op": "run-input", "args": [1]}']]
result = [sorted(answer) for answer in answers]
"""
    result = science.run_sync(code)
    assert result["result"]["data"] == [["err"]] * 4, result


def test_a_forged_second_report_does_not_replace_the_first(science: Sandbox) -> None:
    code = """
import _host, json
_host.call(json.dumps({"op": "run-report", "args": [json.dumps({"ok": True, "data_json": "666"})]}).encode())
result = 1
"""
    result = science.run_sync(code)
    # The forged report came first, so it counts: but it is checked like any report, and holds only data.
    assert result["result"] == {"ok": True, "data": 666, "metrics": result["result"]["metrics"]}
