from __future__ import annotations

from mcp.server.transport_security import TransportSecurityMiddleware

from wasmexec._server.http_app import _starts_a_run, transport_security


def test_named_hosts_match_with_any_port_and_loopback_stays_allowed() -> None:
    check = TransportSecurityMiddleware(transport_security(["mcp.example.com", "10.0.0.5:8765"], []))
    assert check._validate_host("mcp.example.com") and check._validate_host("mcp.example.com:443")
    assert check._validate_host("10.0.0.5:8765") and not check._validate_host("10.0.0.5:9999")
    assert check._validate_host("127.0.0.1:8765") and not check._validate_host("evil.example.com")


def test_only_a_new_run_python_call_counts_as_starting_a_run() -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "run_python", "arguments": {}}}
    assert _starts_a_run(call)
    assert not _starts_a_run({**call, "params": {**call["params"], "requestState": "wasmexec-x"}})  # a resumed run
    assert not _starts_a_run({**call, "params": {"name": "other"}})
    assert not _starts_a_run({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert not _starts_a_run([call]) and not _starts_a_run(None)
