"""Small assertions shared by tests."""

from __future__ import annotations

from typing import Any

from wasmexec import validate_run_result


def data_of(result: Any) -> Any:
    """The run's data; fails the test with the whole result when the run did not succeed."""
    validate_run_result(result)
    assert result["result"]["ok"], result
    return result["result"]["data"]


def error_of(result: Any) -> dict[str, Any]:
    """The run's error; fails the test when the run succeeded."""
    validate_run_result(result)
    assert not result["result"]["ok"], result
    return dict(result["result"]["error"])


def diagnostic(result: Any, code: str) -> dict[str, Any]:
    """The first diagnostic with `code`; fails when there is none."""
    found = [d for d in result["diagnostics"] if d["code"] == code]
    assert found, f"no {code} diagnostic in {result['diagnostics']}"
    return dict(found[0])


def limit_of(result: Any) -> str:
    """Which limit stopped the run (from its SANDBOX_LIMIT diagnostic)."""
    assert error_of(result)["type"] == "SandboxLimitError", result
    return str(diagnostic(result, "SANDBOX_LIMIT")["limit"])
