from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from wasmexec._server.admission import Admission
from wasmexec._server.metrics import RunMetrics


def _result(ok: bool = True, limit: str | None = None, calls: list[dict[str, Any]] | None = None) -> Any:
    diagnostics = [{"severity": "error", "code": "SANDBOX_LIMIT", "message": "m", "limit": limit}] if limit else []
    error = {"type": "E", "message": "m", "retryable": False}
    outcome = {"ok": True, "data": 1} if ok else {"ok": False, "error": error}
    return {"duration_ms": 1500.0, "result": outcome, "diagnostics": diagnostics, "tool_trace": calls or []}


def test_runs_are_counted_by_outcome_limit_and_tool_calls_by_configured_server() -> None:
    metrics = RunMetrics(Admission(), servers=["files"])
    calls = [{"server_id": "files", "ok": True}, {"server_id": "made-up-by-the-guest", "ok": False}]
    metrics.observe_run(_result(calls=calls))
    metrics.observe_run(_result(ok=False, limit="timeout"))
    metrics.observe_run(_result(ok=False, limit="cancelled"))
    metrics.observe_run(RuntimeError("no sandbox"))
    value = metrics.registry.get_sample_value
    assert value("wasmexec_runs_total", {"outcome": "ok"}) == 1
    assert value("wasmexec_runs_total", {"outcome": "limit"}) == 1
    assert value("wasmexec_runs_total", {"outcome": "cancelled"}) == 1
    assert value("wasmexec_runs_total", {"outcome": "internal"}) == 1
    assert value("wasmexec_limit_hits_total", {"limit": "timeout"}) == 1
    assert value("wasmexec_limit_hits_total", {"limit": "cancelled"}) is None
    assert value("wasmexec_tool_calls_total", {"server": "files", "outcome": "ok"}) == 1
    assert value("wasmexec_tool_calls_total", {"server": "other", "outcome": "error"}) == 1
    assert value("wasmexec_run_duration_seconds_count") == 3
    assert value("wasmexec_run_duration_seconds_bucket", {"le": "2.5"}) == 3


def test_gauges_and_breakers_are_read_at_scrape_time_from_a_registry_of_its_own() -> None:
    admission = Admission(2, 0)
    states = {"files": "closed", "git": "open"}
    metrics = RunMetrics(admission, servers=states, breaker_states=lambda: states)
    ticket = admission.admit()
    assert ticket is not None
    with ticket:
        assert metrics.registry.get_sample_value("wasmexec_runs_in_flight") == 1
    value = metrics.registry.get_sample_value
    assert value("wasmexec_runs_in_flight") == 0
    assert value("wasmexec_breaker_state", {"server": "git", "state": "open"}) == 1
    assert value("wasmexec_breaker_state", {"server": "git", "state": "closed"}) == 0
    metrics.count_sampling("ok")
    metrics.count_sampling("anything else")
    assert value("wasmexec_sampling_calls_total", {"outcome": "ok"}) == 1
    assert value("wasmexec_sampling_calls_total", {"outcome": "error"}) == 1
    assert REGISTRY.get_sample_value("wasmexec_runs_in_flight") is None  # never the global registry
    body, content_type = metrics.exposition()
    assert b"wasmexec_runs_total" in body and content_type.startswith("text/plain")
