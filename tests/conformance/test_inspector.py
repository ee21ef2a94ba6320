"""Smoke test over stdio with the MCP inspector CLI (@modelcontextprotocol/inspector@2.12.0, `--cli`).

The inspector starts `python -m wasmexec serve --no-audit` itself and talks to it over stdio, as a desktop
client would. Its exit codes: 0 ok, 1 usage, 4 unreachable, 5 tool error / isError / tool not found,
6 unportable tool schema (with --strict).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conformance.conftest import INSPECTOR, ROOT
from wasmexec import validate_run_result

CLI_TIMEOUT_S = 120
ERAS = ["legacy", "auto", "modern"]


def _inspector(env: dict[str, str], cache_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    # The inspector hands the server only a minimal environment plus what -e names: the cache, and this
    # session's private state and schema cache (tests/conftest.py).
    private = [f"{key}={value}" for key, value in os.environ.items() if key.startswith(("XDG_", "WASMEXEC_"))]
    passed = [flag for pair in zip(["-e"] * len(private), private, strict=True) for flag in pair]
    command = [str(INSPECTOR), "--cli", *passed, "-e", f"WASMEXEC_CACHE_DIR={cache_dir}",
               sys.executable, "-m", "wasmexec", "serve", "--no-audit", *args]  # fmt: skip
    try:
        return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mcp-inspector {' '.join(args)} did not finish within {CLI_TIMEOUT_S} s:\n{exc.stdout!r}")


def _output(process: subprocess.CompletedProcess[str]) -> str:
    return f"exit {process.returncode}\n--- stdout\n{process.stdout}\n--- stderr\n{process.stderr}"


def _call(env: dict[str, str], cache_dir: str, code: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return _inspector(env, cache_dir, *extra, "--method", "tools/call", "--tool-name", "run_python",
                      "--tool-args-json", json.dumps({"code": code}), "--format", "json")  # fmt: skip


def test_tools_list_shows_run_python(node_env: dict[str, str], cache_dir: str) -> None:
    process = _inspector(node_env, cache_dir, "--method", "tools/list")
    assert process.returncode == 0, _output(process)
    tools = json.loads(process.stdout)["tools"]
    assert [tool["name"] for tool in tools] == ["run_python"], tools
    (tool,) = tools
    assert tool["description"] and tool["inputSchema"]["type"] == "object" and "code" in tool["inputSchema"]["required"]
    assert tool["outputSchema"]["type"] == "object", tool


def test_the_tool_schemas_have_no_portability_error(node_env: dict[str, str], cache_dir: str) -> None:
    """--strict exits 6 on an error-severity schema problem (warnings are only printed)."""
    process = _inspector(node_env, cache_dir, "--method", "tools/list", "--strict")
    assert process.returncode == 0, _output(process)


@pytest.mark.parametrize("era", ERAS)
def test_tools_call_returns_the_structured_result(era: str, node_env: dict[str, str], cache_dir: str) -> None:
    process = _call(node_env, cache_dir, "result = 6 * 7", "--protocol-era", era)
    assert process.returncode == 0, _output(process)
    result: dict[str, Any] = json.loads(process.stdout)["result"]
    assert result.get("isError") is not True, result
    structured = result["structuredContent"]
    validate_run_result(structured)
    assert structured["tool_name"] == "run_python"
    assert structured["result"]["ok"] is True and structured["result"]["data"] == 42, structured
    assert result["content"][0]["type"] == "text" and "42" in result["content"][0]["text"], result


def test_a_failing_script_is_a_result_not_a_tool_error(node_env: dict[str, str], cache_dir: str) -> None:
    """As docs/result.md says: an exception in the code comes back as ok=false with a diagnostic, exit code 0."""
    process = _call(node_env, cache_dir, "raise ValueError('boom')")
    assert process.returncode == 0, _output(process)
    structured = json.loads(process.stdout)["result"]["structuredContent"]
    validate_run_result(structured)
    assert structured["result"]["ok"] is False and structured["result"]["error"]["type"] == "ValueError", structured
    assert [d["code"] for d in structured["diagnostics"]] == ["UNCAUGHT_EXCEPTION"], structured


def test_an_unknown_tool_exits_5(node_env: dict[str, str], cache_dir: str) -> None:
    process = _inspector(
        node_env, cache_dir, "--method", "tools/call", "--tool-name", "no_such_tool", "--format", "json"
    )
    assert process.returncode == 5, _output(process)
    assert json.loads(process.stderr)["error"]["code"] == "tool_not_found", _output(process)  # errors go to stderr
