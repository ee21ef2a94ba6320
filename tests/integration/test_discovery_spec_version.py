"""`codemode.discovery.spec_version`: one definition, on the host, read by the guest."""

from __future__ import annotations

from typing import Any

from tests.helpers import data_of, log_text
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import SPEC_VERSION, NoTools

#: A version no guest could know unless it asked the host.
ODD_VERSION = "0.0-from-the-host"


class _OddVersionHost(NoTools):
    """A tool host without servers whose discovery API has an unusual version."""

    def catalog(self, run: RunState, op: str, request: Any) -> Any:
        if op == "spec_version":
            return ODD_VERSION
        return super().catalog(run, op, request)


def test_the_guest_reports_the_spec_version_its_host_answers(runtime: Runtime) -> None:
    sandbox = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, tools=_OddVersionHost())
    code = (
        "from codemode import discovery\n"
        "from codemode.discovery import spec_version\n"
        "result = [discovery.spec_version, spec_version, 'spec_version' in dir(discovery)]"
    )
    assert data_of(sandbox.run_sync(code)) == [ODD_VERSION, ODD_VERSION, True]


def test_discovery_spec_version_is_the_brokers_spec_version(tool_sandbox: Sandbox) -> None:
    code = "from codemode import discovery\ndiscovery.spec_version"
    assert data_of(tool_sandbox.run_sync(code)) == SPEC_VERSION


def test_help_on_discovery_shows_the_spec_version(tool_sandbox: Sandbox) -> None:
    result = tool_sandbox.run_sync("from codemode import discovery\nhelp(discovery)")
    data_of(result)
    assert f"spec_version = '{SPEC_VERSION}'" in log_text(result)


def test_discovery_spec_version_works_without_any_configured_server(sandbox: Sandbox) -> None:
    code = "from codemode import discovery\ndiscovery.spec_version"
    assert data_of(sandbox.run_sync(code)) == SPEC_VERSION
