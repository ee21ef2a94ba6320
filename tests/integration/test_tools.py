"""Sandbox code discovers and calls the tools of real MCP servers through the host."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.helpers import data_of, diagnostic, error_of, limit_of, log_text
from tests.integration.conftest import SECRET, SERVERS
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config
from wasmexec._tools.policy import Policy


def test_list_servers_names_every_configured_server_with_its_module(tool_sandbox: Sandbox) -> None:
    data = data_of(tool_sandbox.run_sync("from codemode import discovery\nresult = discovery.list_servers()"))
    modules = {entry["server_id"]: entry["module"] for entry in data}
    assert modules["awkward-names"] == "awkward_names" and modules["everything"] == "everything"
    assert len(modules) == 7


def test_the_guest_asks_for_each_detail_level(tool_sandbox: Sandbox) -> None:
    # The fields of each level are tested fast in tests/unit/test_broker.py; this is the guest's path.
    code = """
from codemode import discovery
result = {d: sorted(discovery.list_tools("slow", detail=d)[0]) for d in ("name", "description", "full")}
"""
    data = data_of(tool_sandbox.run_sync(code))
    assert data["name"] == ["export_name", "tool_name"] and "description" in data["description"]
    assert "input_schema" in data["full"]


def test_awkward_tool_names_map_to_python_names_by_the_documented_rules(tool_sandbox: Sandbox) -> None:
    code = (
        "from codemode import discovery\nresult = {t['tool_name']: t['export_name'] for t in "
        "discovery.list_tools('awkward-names', detail='name')}"
    )
    names = data_of(tool_sandbox.run_sync(code))
    assert names["list"] == "list" and names["class"] == "class_" and names["2fa_check"] == "_2fa_check"
    assert names["fetch_HTTPResponse"] == "fetch_http_response"
    same = sorted(["get.user", "get-user", "getUser", "GetUser"], key=lambda n: (n.lower(), n))
    assert [names[n] for n in same] == ["get_user", "get_user__2", "get_user__3", "get_user__4"]


def test_a_collided_name_still_calls_the_original_tool(tool_sandbox: Sandbox) -> None:
    code = """
import servers.awkward_names as aw
result = [aw.class_.tool_name, aw.get_user__4.tool_name]
"""
    assert data_of(tool_sandbox.run_sync(code)) == ["class", "getUser"]


def test_search_ranks_the_exact_name_first(tool_sandbox: Sandbox) -> None:
    code = "from codemode import discovery\nresult = discovery.search_tools('echo', limit=3)"
    data = data_of(tool_sandbox.run_sync(code))
    assert data["query"] == "echo"
    assert (data["results"][0]["server_id"], data["results"][0]["tool_name"]) == ("everything", "echo")


def test_search_finds_tools_by_description_words_and_fuzzy_names(tool_sandbox: Sandbox) -> None:
    code = """
from codemode import discovery
by_words = [r["tool_name"] for r in discovery.search_tools("current time zone", limit=5)["results"]]
fuzzy = [r["tool_name"] for r in discovery.search_tools("sleep_fro", limit=3)["results"]]
result = [by_words, fuzzy]
"""
    by_words, fuzzy = data_of(tool_sandbox.run_sync(code))
    assert "get_current_time" in by_words
    assert fuzzy[0] == "sleep_for"


def test_a_tool_is_called_with_keywords_or_a_dict_and_its_text_is_unwrapped(tool_sandbox: Sandbox) -> None:
    code = """
import servers.everything as ev
result = [await ev.echo(message="hi"), await ev.echo({"message": "there"})]
"""
    assert data_of(tool_sandbox.run_sync(code)) == ["Echo: hi", "Echo: there"]


def test_structured_content_is_returned_as_is(tool_sandbox: Sandbox) -> None:
    code = "import servers.awkward_names as aw\nawait aw.structured_output(a=2, b=3)"
    data = data_of(tool_sandbox.run_sync(code))
    assert data["sum"] == 5 and data["product"] == 6


def test_an_image_result_comes_back_whole_with_base64_data(tool_sandbox: Sandbox) -> None:
    data = data_of(tool_sandbox.run_sync("import servers.awkward_names as aw\nawait aw.image_result()"))
    image = next(block for block in data["content"] if block["type"] == "image")
    assert image["mimeType"] == "image/png" and len(image["data"]) > 20


def test_is_error_raises_tool_call_error_with_the_servers_text(tool_sandbox: Sandbox) -> None:
    code = """
import servers.awkward_names as aw
from codemode.errors import ToolCallError
try:
    await aw.error_result()
except ToolCallError as exc:
    result = [str(exc), exc.hint]
"""
    message, hint = data_of(tool_sandbox.run_sync(code))
    assert message and hint


def test_bad_arguments_fail_validation_before_the_server_is_called(tool_sandbox: Sandbox) -> None:
    code = """
import servers.slow as slow
from codemode.errors import SchemaValidationError
try:
    await slow.sleep_for(seconds="soon")
except SchemaValidationError as exc:
    result = {"errors": exc.errors, "detail": exc.detail, "hint": exc.hint}
"""
    result = tool_sandbox.run_sync(code)
    data = data_of(result)
    assert data["errors"][0]["pointer"] == "/seconds"
    assert "number" in data["errors"][0]["expected"] and "soon" in data["errors"][0]["received"]
    assert data["detail"]["tool"] == "sleep_for" and data["detail"]["export_name"] == "sleep_for"
    assert isinstance(data["detail"]["example"]["seconds"], (int, float))
    (entry,) = result["tool_trace"]  # the attempt is traced, though the server never saw it
    assert entry["ok"] is False and entry["error"].startswith("invalid-argument: sleep_for() arguments")


def test_unknown_tools_and_servers_suggest_close_names(tool_sandbox: Sandbox) -> None:
    result = tool_sandbox.run_sync("import servers.slow as slow\nawait slow.sleep_fr(seconds=1)")
    assert error_of(result)["type"] == "ToolNotFoundError" and "sleep_for" in error_of(result)["message"]
    result = tool_sandbox.run_sync("import servers.slo")
    assert error_of(result)["type"] == "ServerNotFoundError" and "slow" in error_of(result)["message"]
    assert diagnostic(result, "IMPORT_FAILURE")["hint"]


def test_gathered_calls_run_concurrently_on_the_host(tool_sandbox: Sandbox) -> None:
    code = """
import asyncio, time
import servers.slow as slow
start = time.monotonic()
values = await asyncio.gather(*(slow.sleep_for(seconds=0.5) for _ in range(4)))
result = {"values": values, "elapsed": time.monotonic() - start}
"""
    result = tool_sandbox.run_sync(code)
    data = data_of(result)
    assert data["values"] == [{"result": 0.5}] * 4  # MCPServer wraps a bare return as structured {"result": …}
    assert data["elapsed"] < 1.8
    assert result["result"]["metrics"]["tool_calls"] == 4
    assert [entry["tool_name"] for entry in result["tool_trace"]] == ["sleep_for"] * 4
    assert all(entry["ok"] and "arguments" not in entry for entry in result["tool_trace"])


def test_a_2026_era_server_is_called_like_any_other(tool_sandbox: Sandbox) -> None:
    code = "import servers.time as t\nawait t.get_current_time(timezone='UTC')"
    data = data_of(tool_sandbox.run_sync(code))
    assert data["timezone"] == "UTC"


def test_help_shows_the_tools_parameters(tool_sandbox: Sandbox) -> None:
    result = tool_sandbox.run_sync("import servers.slow as slow\nhelp(slow.sleep_for)")
    data_of(result)
    text = log_text(result)
    assert "sleep_for(" in text and "seconds" in text


def test_module_meta_describes_the_server(tool_sandbox: Sandbox) -> None:
    data = data_of(tool_sandbox.run_sync("import servers.slow as slow\nslow.__meta__"))
    assert data["server_id"] == "slow" and data["tools"][0]["export_name"] == "sleep_for"


def test_the_tool_call_cap_is_a_sandbox_limit(tool_sandbox: Sandbox) -> None:
    code = "import servers.everything as ev\nfor i in range(5):\n    await ev.echo(message=str(i))"
    result = tool_sandbox.run_sync(code, Limits(max_tool_calls=3))
    assert limit_of(result) == "tool_calls"
    assert result["result"]["metrics"]["tool_calls"] == 3


def test_configured_secrets_are_redacted_from_results(tool_sandbox: Sandbox) -> None:
    result = tool_sandbox.run_sync("import servers.secrets as s\nv = await s.show_env(name='API_TOKEN')\nprint(v)\nv")
    assert data_of(result) == {"result": "[REDACTED]"}
    assert result["logs"][0]["message"] == "{'result': '[REDACTED]'}"
    assert SECRET not in str(result)


def test_a_server_that_crashes_mid_call_fails_that_call_and_restarts_for_the_next(tool_sandbox: Sandbox) -> None:
    code = """
import servers.crashy as c
from codemode.errors import ToolCallError
try:
    await c.crash()
    crashed = None
except ToolCallError as exc:
    crashed = str(exc)
result = [crashed, await c.ok()]
"""
    crashed, ok = data_of(tool_sandbox.run_sync(code))
    assert crashed and "crashy" in crashed
    assert ok == {"result": "ok"}


def test_a_hanging_tool_never_holds_the_run_past_its_deadline(tool_sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = tool_sandbox.run_sync("import servers.hang as h\nawait h.hang()", Limits(timeout_ms=1500))
    assert limit_of(result) == "timeout"
    assert time.monotonic() - started < 10
    assert data_of(tool_sandbox.run_sync("import servers.everything as ev\nawait ev.echo(message='still')")) == (
        "Echo: still"
    )


def test_policy_globs_on_python_names_deny_the_protocol_tool(runtime: Runtime, tmp_path: Path) -> None:
    # `tools list` shows awkward-names' `fetch_HTTPResponse` as `awkward_names.fetch_http_response`.
    config = parse_config({"mcpServers": {"awkward-names": {"command": sys.executable,
                                                            "args": [str(SERVERS / "awkward.py")]}}})  # fmt: skip
    for glob in ("awkward_names.fetch_http_response", "awkward-names.fetch_http_*"):
        with (tmp_path / "servers.log").open("a") as errlog, Broker(
            config, policy=Policy(deny=(glob,)), errlog=errlog, warn=lambda m: None
        ) as broker:  # fmt: skip
            sandbox = Sandbox(Limits(timeout_ms=20_000), runtime=runtime, tools=broker)
            code = "import servers.awkward_names as aw\nawait aw.fetch_http_response(url='https://example.com/')"
            error = error_of(sandbox.run_sync(code))
            assert error["type"] == "ApprovalDeniedError" and "fetch_HTTPResponse" in error["message"], glob
