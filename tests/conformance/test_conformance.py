"""The MCP conformance suite (@modelcontextprotocol/conformance@0.1.16) against `wasmexec serve --http`.

The CLI runs on the pinned Node 22 and tests only HTTP servers (`conformance server --url ...`); it speaks
protocol 2025-11-25 through the TypeScript SDK's client. Each scenario that applies to a server without the
reference fixtures is one test here, and must pass with no FAILURE and no WARNING check.

Scenarios that apply (APPLICABLE): server-initialize, ping, tools-list (every tool has a name, a description and
an inputSchema), logging-set-level (streamed output as log notifications), resources-list (artifacts are
resources; the caller's list), server-sse-multiple-streams (three concurrent POST SSE streams in one session) and
dns-rebinding-protection (a foreign Host/Origin gets a 4xx, a loopback one a 2xx).

Scenarios that do not apply, and why (they are listed in expected-failures.yml, which the full-suite test
checks, so that a scenario that starts passing or a new one is noticed):
- capabilities wasmexec does not declare (it declares `tools`, `logging` and `resources` without
  subscriptions or templates; these get -32601 Method not found or a resource the fixture names is not there):
  completion-complete (completion/complete, on the fixture prompt
  test_prompt_with_arguments), tools-call-with-logging (sets the log level first, then calls the fixture tool
  test_tool_with_logging), resources-read-text (test://static-text), resources-read-binary
  (test://static-binary), resources-templates-read (test://template/123/data), resources-subscribe and
  resources-unsubscribe (test://watched-resource), prompts-list, prompts-get-simple (test_simple_prompt),
  prompts-get-with-args (test_prompt_with_arguments), prompts-get-embedded-resource
  (test_prompt_with_embedded_resource), prompts-get-with-image (test_prompt_with_image);
- fixture tools of the reference "everything" server (wasmexec answers -32602 "Unknown tool"; it has only
  run_python): tools-call-simple-text (test_simple_text), tools-call-image (test_image_content),
  tools-call-audio (test_audio_content), tools-call-embedded-resource (test_embedded_resource),
  tools-call-mixed-content (test_multiple_content_types), tools-call-error (test_error_handling),
  tools-call-with-progress (test_tool_with_progress), tools-call-sampling (test_sampling),
  tools-call-elicitation (test_elicitation), elicitation-sep1034-defaults (test_elicitation_sep1034_defaults),
  elicitation-sep1330-enums (test_elicitation_sep1330_enums), and the two "pending" scenarios
  json-schema-2020-12 (json_schema_2020_12_tool) and server-sse-polling (test_reconnection, a tool that closes
  its SSE stream mid-call; without it the scenario only warns that no priming event and no `retry` field were
  sent, i.e. that wasmexec offers no SSE resumability, which is optional).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.conftest import CONFORMANCE, HERE

CLI_TIMEOUT_S = 120
BASELINE = HERE / "expected-failures.yml"

# scenario -> the checks that must be SUCCESS
APPLICABLE: dict[str, set[str]] = {
    "server-initialize": {"server-initialize"},
    "ping": {"ping"},
    "tools-list": {"tools-list"},
    "logging-set-level": {"logging-set-level"},
    "resources-list": {"resources-list"},
    "server-sse-multiple-streams": {"server-accepts-multiple-post-streams", "server-sse-streams-functional"},
    "dns-rebinding-protection": {"localhost-host-rebinding-rejected", "localhost-host-valid-accepted"},
}


def _conformance(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([str(CONFORMANCE), *args], env=env, cwd=HERE, capture_output=True, text=True,
                              timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"conformance {' '.join(args)} did not finish within {CLI_TIMEOUT_S} s:\n{exc.stdout!r}")


def _output(process: subprocess.CompletedProcess[str]) -> str:
    return f"exit {process.returncode}\n--- stdout\n{process.stdout}\n--- stderr\n{process.stderr}"


def _baseline() -> list[str]:
    """The `server:` list of expected-failures.yml (a flat YAML list; no YAML library needed)."""
    return re.findall(r"^\s+-\s+([a-z0-9-]+)\s*$", BASELINE.read_text(), flags=re.MULTILINE)


def _checks(output_dir: Path, scenario: str) -> list[dict[str, Any]]:
    files = sorted(output_dir.glob(f"server-{scenario}-*/checks.json"))
    assert len(files) == 1, f"expected one checks.json for {scenario} in {output_dir}, found {files}"
    checks: list[dict[str, Any]] = json.loads(files[0].read_text())
    return checks


@pytest.mark.parametrize("scenario", sorted(APPLICABLE))
def test_scenario_passes(scenario: str, http_url: str, node_env: dict[str, str], tmp_path: Path) -> None:
    process = _conformance(node_env, "server", "--url", http_url, "--scenario", scenario, "-o", str(tmp_path))
    assert process.returncode == 0, _output(process)
    checks = _checks(tmp_path, scenario)
    bad = [check for check in checks if check["status"] in ("FAILURE", "WARNING")]
    assert not bad, json.dumps(bad, indent=2)
    passed = {check["id"] for check in checks if check["status"] == "SUCCESS"}
    assert APPLICABLE[scenario] <= passed, json.dumps(checks, indent=2)
    if scenario == "tools-list":
        (listed,) = (check for check in checks if check["id"] == "tools-list")
        assert listed["details"]["tools"] == ["run_python"], listed


def test_every_server_scenario_is_classified(node_env: dict[str, str]) -> None:
    """Each server scenario of the pinned suite is either run above or listed (with its reason) as not applying."""
    process = _conformance(node_env, "list", "--server")
    assert process.returncode == 0, _output(process)
    listed = set(re.findall(r"^\s+-\s+([a-z0-9-]+)\s+\[", process.stdout, flags=re.MULTILINE))
    baseline = _baseline()
    assert len(baseline) == len(set(baseline)), baseline
    assert not set(baseline) & set(APPLICABLE)
    assert listed == set(baseline) | set(APPLICABLE), _output(process)


def test_the_full_suite_matches_the_baseline(http_url: str, node_env: dict[str, str], tmp_path: Path) -> None:
    """All scenarios at once: only those in expected-failures.yml fail, and each of them still does."""
    process = _conformance(node_env, "server", "--url", http_url, "--suite", "all",
                           "--expected-failures", str(BASELINE), "-o", str(tmp_path))  # fmt: skip
    assert process.returncode == 0, _output(process)
    # a baseline entry that was not run would not be reported stale: make sure every scenario ran
    assert f"Running all suite ({len(APPLICABLE) + len(_baseline())} scenarios)" in process.stdout, _output(process)
    assert "Baseline check passed" in process.stdout, _output(process)
