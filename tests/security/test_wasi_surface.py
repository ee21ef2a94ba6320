"""The guest's imports are exactly the host interface plus WASI, and each WASI family is inert.

The default image is a component (WASI 0.2); the science image a core module (WASI preview 1 and
its door, ``host.call``): its import list is checked in test_science_surface.py, and every test
of what the guest can do with WASI runs against both."""

from __future__ import annotations

import re
import time

import pytest

from tests.helpers import data_of, diagnostic, error_of, limit_of
from tests.security._support import (
    RAW_HOST,
    UNBLOCK_IMPORTS,
    assert_host_survives,
    default_only,
    profile_of,
    run,
    timed_run,
)
from wasmexec import Limits, Runtime, Sandbox

HOST_INTERFACE = "wasmexec:sandbox/host@0.1.0"

#: What componentize-py's CPython imports. Any new capability (wasi:http, wasi:random/insecure,
#: a second host interface, ...) must be a deliberate decision that updates this list.
EXPECTED_WASI = {
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stderr",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stderr",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/preopens",
    "wasi:filesystem/types",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
}


def _imports(runtime: Runtime) -> dict[str, object]:
    prepared = runtime.guest(True)
    return dict(prepared.component.type.imports(prepared.engine))


_COMPONENT_ONLY = (
    "the science image is a core module: test_science_surface.py checks its imports (the door and WASI p1)"
)


@default_only(_COMPONENT_ONLY)
def test_the_component_imports_exactly_the_host_interface_and_wasi(runtime: Runtime) -> None:
    names = set(_imports(runtime))
    assert HOST_INTERFACE in names
    wasi = names - {HOST_INTERFACE}
    unversioned = {name.partition("@")[0] for name in wasi}
    assert unversioned == EXPECTED_WASI
    for name in wasi:
        assert re.fullmatch(r"wasi:[a-z-]+/[a-z-]+@0\.2\.\d+", name), name


@default_only(_COMPONENT_ONLY)
def test_both_limit_modes_import_the_same_interfaces(runtime: Runtime) -> None:
    fuel, no_fuel = runtime.guest(True), runtime.guest(False)
    assert set(fuel.component.type.imports(fuel.engine)) == set(no_fuel.component.type.imports(no_fuel.engine))


@default_only(_COMPONENT_ONLY)
def test_the_host_interface_offers_only_catalog_start_call_start_sample_and_wait(runtime: Runtime) -> None:
    prepared = runtime.guest(True)
    host = _imports(runtime)[HOST_INTERFACE]
    members = set(host.ty.exports(prepared.engine))  # type: ignore[attr-defined]
    functions = members - {"error-kind", "host-error", "completion", "call-kind"}  # the WIT types
    assert functions == {"catalog", "start-call", "start-sample", "wait"}


# -- wasi:filesystem: no preopens ------------------------------------------------------------


def test_wasi_filesystem_has_no_preopened_directory_without_a_workspace(runtime: Runtime) -> None:
    # wasi-libc resolves every path against the preopens; with none, even "/" does not exist.
    code = "import os\n[os.path.exists('/'), os.path.isdir('.'), os.access('/', os.R_OK)]"
    result = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, workspaces=False).run_sync(code)
    assert data_of(result) == [False, False, False]


def test_wasi_filesystem_preopens_only_the_workspace_and_tmp(runtime: Runtime) -> None:
    code = "import os\n[os.path.exists(p) for p in ('/', '/workspace', '/tmp', '/skills', '/workspace/..')]"
    assert data_of(run(runtime, code)) == [False, True, True, False, False]


# -- wasi:sockets: denied by the empty context -------------------------------------------------


def test_wasi_sockets_refuse_to_create_a_socket(runtime: Runtime) -> None:
    code = UNBLOCK_IMPORTS + "import _socket\n_socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)"
    error = error_of(run(runtime, code))
    if profile_of(runtime) == "science":  # WASI preview 1 has no call that makes a socket: ENOTSUP
        assert error["type"] == "OSError" and "Not supported" in error["message"], error
    else:  # WASI 0.2's socket calls, denied by the empty context
        assert error["type"] == "PermissionError"
    assert_host_survives(runtime)


# -- wasi:cli: environment, arguments, stdin, exit -----------------------------------------------


def test_wasi_environment_and_arguments_are_empty(runtime: Runtime) -> None:
    # The science snapshot keeps the argv it was pre-initialized with: [''] (no host argument).
    argv = [""] if profile_of(runtime) == "science" else []
    assert data_of(run(runtime, "import os, sys\n[dict(os.environ), sys.argv]")) == [{}, argv]


def test_wasi_stdin_is_empty_and_never_blocks(runtime: Runtime) -> None:
    result, elapsed = timed_run(runtime, "import sys\nsys.stdin.buffer.read()", timeout_ms=5_000)
    assert data_of(result) == "b''"
    assert elapsed < 4


def test_wasi_exit_ends_the_run_with_a_structured_failure(runtime: Runtime) -> None:
    for code in ("import os\nos._exit(3)", "import os\nos._exit(0)"):
        result = run(runtime, "print('before')\n" + code)
        error = error_of(result)
        assert error["type"] == "SandboxError"
        assert [entry["message"] for entry in result["logs"]] == ["before"]
    assert_host_survives(runtime)


def test_wasi_exit_is_reported_with_its_cause(runtime: Runtime) -> None:
    error = error_of(run(runtime, "import os\nos._exit(3)"))
    assert "exit" in error["message"].lower(), error


# -- wasi:random ----------------------------------------------------------------------------------


def test_wasi_random_gives_fresh_bytes_to_every_run(runtime: Runtime) -> None:
    code = "import os, secrets\n[os.urandom(16).hex(), secrets.token_hex(16)]"
    first, second = data_of(run(runtime, code)), data_of(run(runtime, code))
    assert len(set(first + second)) == 4


# -- wasi:clocks: real time, harmless --------------------------------------------------------------


def test_wasi_wall_clock_is_the_real_time_and_monotonic_clock_moves_forward(runtime: Runtime) -> None:
    before = time.time()
    wall, first, second = data_of(run(runtime, "import time\n[time.time(), time.monotonic(), time.monotonic()]"))
    assert before - 60 <= wall <= time.time() + 60
    assert 0 <= first <= second


# -- wasi:io/poll: blocking waits must still end at the run's deadline ----------------------------
#
# codemode replaces time.sleep with a host-backed sleep that honours the deadline, and blocks the
# select module. The interpreter's own blocking calls are still reachable (a fresh `time` module,
# select with the blocker removed, locks with a timeout); they would block inside wasmtime's WASI
# code, where epochs cannot interrupt, so the host disarms WASI's clock subscriptions: such a wait
# ends the run at once with a BLOCKING_WAIT error instead of outliving the deadline.


@pytest.mark.parametrize(
    "code",
    [
        "import sys\ndel sys.modules['time']\nimport time\ntime.sleep(2.5)\nresult = 'slept'",
        UNBLOCK_IMPORTS + "import select\nselect.select([], [], [], 2.5)\nresult = 'selected'",
    ],
    ids=["fresh-time-module", "select"],
)
def test_a_blocking_wasi_wait_is_refused_instead_of_outliving_the_deadline(runtime: Runtime, code: str) -> None:
    result, elapsed = timed_run(runtime, code, timeout_ms=60_000)
    assert error_of(result)["type"] == "SandboxError"
    assert "blocking wait" in diagnostic(result, "BLOCKING_WAIT")["message"]
    assert elapsed < 5, elapsed
    assert_host_survives(runtime)


# -- the host interface itself -----------------------------------------------------------------------


def _host_call(call: str) -> str:
    """Guest code that makes one raw call on the host interface and returns how it ended."""
    return RAW_HOST + (
        "try:\n"
        f"    result = ['ok', repr({call})]\n"
        "except Err as err:\n"
        "    result = ['err', err.value.kind.name, err.value.message]\n"
    )


@pytest.mark.parametrize(
    ("call", "outcome", "kind"),
    [
        ("host.catalog('list_servers', '{}')", "ok", None),
        ("host.catalog('get_server', 'not json')", "err", "INVALID_ARGUMENT"),
        ("host.catalog('list_servers', 'x' * (9 * 1024 * 1024))", "err", "LIMIT_EXCEEDED"),
        ("host.catalog('no-such-op', '{}')", "err", None),
        ("host.start_call('no-such-server', 'tool', '{}', host.CallKind.TOOL)", "err", "NOT_FOUND"),
        ("host.start_call('s', 't', '{', host.CallKind.TOOL)", "err", "INVALID_ARGUMENT"),
        ("host.wait([1, 2, 3], 0)", "ok", None),
        ("host.wait([], 0)", "ok", None),
    ],
)
def test_garbage_sent_straight_to_the_host_interface_comes_back_as_errors(
    runtime: Runtime, call: str, outcome: str, kind: str | None
) -> None:
    data = data_of(run(runtime, _host_call(call)))
    assert data[0] == outcome, data
    if kind is not None:
        assert data[1] == kind, data
    assert_host_survives(runtime)


def test_waiting_on_unknown_handles_reports_each_as_not_found(runtime: Runtime) -> None:
    code = RAW_HOST + "result = [(c.handle, c.outcome.value.kind.name) for c in host.wait([7, 8], 0)]"
    assert data_of(run(runtime, code)) == [[7, "NOT_FOUND"], [8, "NOT_FOUND"]]


def test_hammering_start_call_hits_the_tool_call_limit(runtime: Runtime) -> None:
    code = RAW_HOST + (
        "kinds = []\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        host.start_call('s', 't', '{}', host.CallKind.TOOL)\n"
        "    except Err as err:\n"
        "        kinds.append(err.value.kind.name)\n"
        "result = [kinds.count('NOT_FOUND'), kinds.count('LIMIT_EXCEEDED')]"
    )
    result = run(runtime, code, max_tool_calls=5)
    assert data_of(result) == [5, 295]
    assert result["result"]["metrics"]["tool_calls"] == 5


def test_a_host_wait_never_outlasts_the_deadline(runtime: Runtime) -> None:
    code = RAW_HOST + "host.wait([], 2 ** 32 - 1)\nresult = 'woke up'"
    result, elapsed = timed_run(runtime, code, timeout_ms=500)
    assert limit_of(result) == "timeout"
    assert elapsed < 5
