"""What discovery says a tool returns: the output schema's TypedDicts, or the shapes observed so far.

The broker half runs against in-process servers (see test_broker.py); the shape rules are
plain functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent

from tests.unit.test_broker import _broker, _call, _in_process, _run, _wait_until
from wasmexec._runctx.toolhost import HostCallError
from wasmexec._tools.broker import Broker
from wasmexec._tools.policy import Policy
from wasmexec._tools.schema_cache import SchemaCache
from wasmexec._tools.shapes import MAX_SHAPE_CHARS, ObservedReturns, merge, shape_of


def _shapes_server() -> MCPServer:
    server = MCPServer("shapes", version="1.0.0", log_level="WARNING")

    @server.tool(structured_output=False)
    async def read_file(path: str) -> CallToolResult:
        """Read a file (structured content, no output schema), like the filesystem server."""
        value = {"content": "secret text of " + path, **({"lines": 2} if path != "short" else {})}
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(value))], structured_content=value)

    @server.tool(structured_output=False)
    async def picture() -> list[Any]:
        """An image and a caption (several blocks, no output schema)."""
        return [TextContent(type="text", text="caption"), ImageContent(type="image", data="AAAA", mimeType="image/png")]

    @server.tool(structured_output=False)
    async def broken() -> CallToolResult:
        """Report an error (isError)."""
        return CallToolResult(content=[TextContent(type="text", text="it broke")], is_error=True)

    return server


def _shapes_broker(tmp_path: Path, **extra: Any) -> Any:
    return _broker(tmp_path, factory=_in_process({"tools": _shapes_server()}), **extra)


def _get_tool(broker: Broker, name: str) -> dict[str, Any]:
    return broker.catalog(_run(broker), "get_tool", {"server_id": "tools", "tool_name": name})  # type: ignore[no-any-return]


# -- the shape rules ----------------------------------------------------------------------------


def test_a_shape_has_types_and_field_names_never_values() -> None:
    shape = shape_of({"content": "the secret", "size": 3, "tags": ["a", "b"], "ok": True, "none": None})
    assert shape == {
        "type": "object",
        "properties": {"content": {"type": "string"}, "size": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string"}}, "ok": {"type": "boolean"},
                       "none": {"type": "null"}},
        "required": ["content", "none", "ok", "size", "tags"],
    }  # fmt: skip
    assert "secret" not in json.dumps(shape)


def test_keys_that_are_data_make_a_mapping_without_key_names() -> None:
    by_address = shape_of({"alice@example.com": 1, "bob@example.com": 2})
    by_path = shape_of({"/etc/passwd": "x"})
    many = shape_of({f"k{i}": i for i in range(100)})
    for shape in (by_address, by_path, many):
        assert "properties" not in shape and shape["type"] == "object"
    assert by_address["additionalProperties"] == {"type": "integer"}
    assert "example.com" not in json.dumps(by_address) and "passwd" not in json.dumps(by_path)


def test_merged_shapes_unite_types_and_make_keys_not_always_seen_optional() -> None:
    merged = merge(shape_of({"a": 1, "b": "x"}), shape_of({"a": 2.5}))
    assert merged["required"] == ["a"]
    assert merged["properties"]["a"] == {"anyOf": [{"type": "integer"}, {"type": "number"}]}
    assert merge(shape_of("text"), shape_of(None)) == {"anyOf": [{"type": "string"}, {"type": "null"}]}


def test_a_huge_or_deep_result_gives_a_bounded_shape() -> None:
    deep: Any = "leaf"
    for _ in range(10_000):
        deep = {"next": deep}
    wide = {f"k{i}": {f"j{j}": {"x": [1] * 1000} for j in range(30)} for i in range(30)}
    for value in (deep, wide, [list(range(1000))] * 1000):
        assert len(json.dumps(shape_of(value))) <= MAX_SHAPE_CHARS


def test_observed_shapes_persist_with_the_schema_cache_and_are_dropped_with_it(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    observed = ObservedReturns(SchemaCache(path))
    shape = observed.update("s:f", "read", "digest1", {"content": "x"})
    assert shape is not None
    observed.store("s:f", "read", "digest1", shape)
    assert observed.update("s:f", "read", "digest1", {"content": "y"}) is None  # nothing new: nothing to write
    again = ObservedReturns(SchemaCache(path))  # another process
    assert again.get("s:f", "read", "digest1") == shape
    assert again.get("s:f", "read", "digest2") is None  # the tool changed since: not shown
    again.invalidate("s:f")
    assert ObservedReturns(SchemaCache(path)).get("s:f", "read", "digest1") is None


# -- through the broker ---------------------------------------------------------------------------


def test_a_tool_without_an_output_schema_shows_the_shapes_of_the_results_seen(tmp_path: Path) -> None:
    with _shapes_broker(tmp_path) as broker:
        assert "observed_returns" not in _get_tool(broker, "read_file")
        run = _run(broker)
        assert json.loads(str(_call(run, "read_file", {"path": "short"})))["content"].startswith("secret")
        assert json.loads(str(_call(run, "read_file", {"path": "long"})))["lines"] == 2
        run.finish()
        view = _wait_for_observed(broker, "read_file", "lines")
    assert view["observed_returns"]["return_type"] == "ReadFileResult"
    assert "content: str" in view["observed_returns"]["typed_dicts"]
    assert "lines: NotRequired[int]" in view["observed_returns"]["typed_dicts"]
    assert "ReadFileResult (observed in earlier results" in view["docstring"]
    assert "secret" not in json.dumps(view)


def _wait_for_observed(broker: Broker, name: str, key: str) -> dict[str, Any]:
    """The tool's view once a shape with `key` is stored (shapes are stored beside the answers)."""
    _wait_until(lambda: key in json.dumps(_get_tool(broker, name).get("observed_returns")))
    return _get_tool(broker, name)


def test_a_tool_with_an_output_schema_shows_its_typeddict_and_nothing_observed(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker)
        _call(run, "get_sum", {"a": 1, "b": 2})
        run.finish()
        view = _get_tool(broker, "get_sum")
    assert view["return_type"] == "GetSumResult" and view["signature"].endswith("-> GetSumResult")
    assert view["typed_dicts"] == "class GetSumResult(TypedDict):\n    result: int"
    assert "class GetSumResult(TypedDict):" in view["docstring"] and "observed_returns" not in view


def test_raw_returns_the_whole_result_and_does_not_raise_on_is_error(tmp_path: Path) -> None:
    with _shapes_broker(tmp_path) as broker:
        run = _run(broker)
        handles = {}
        for name, raw in (("read_file", True), ("broken", True), ("broken", False), ("picture", False)):
            run.tool_calls += 1
            handle = run.next_handle()
            run.reserve(handle, 2)
            arguments = {"path": "x"} if name == "read_file" else {}
            broker.start_call(run, handle, "tools", name, arguments, kind="tool-raw" if raw else "tool")
            handles[name, raw] = handle
        answers = {key: dict(run.wait([h], 20))[h] for key, h in handles.items()}
        run.finish()
    whole = json.loads(str(answers["read_file", True]))
    assert whole["isError"] is False and whole["content"][0]["type"] == "text"
    assert {"content", "structuredContent", "isError"} <= set(whole) and "resultType" not in whole
    assert json.loads(whole["content"][0]["text"])["content"] == "secret text of x"
    assert json.loads(str(answers["broken", True]))["isError"] is True
    error = answers["broken", False]
    assert isinstance(error, HostCallError) and error.kind == "tool-error"
    picture = json.loads(str(answers["picture", False]))
    assert [block["type"] for block in picture["content"]] == ["text", "image"]


# -- policy in discovery ------------------------------------------------------------------------


def test_denied_tools_are_left_out_of_discovery_and_named_as_denied(tmp_path: Path) -> None:
    policy = Policy(deny=("tools.fail",), require_approval=("tools.get_sum",))
    with _broker(tmp_path, policy=policy) as broker:
        run = _run(broker)
        listed = {t["tool_name"]: t for t in broker.catalog(run, "list_tools", {"server_id": "tools"})}
        found = broker.catalog(run, "search_tools", {"query": "fail error"})["results"]
        module = broker.catalog(run, "module", {"module": "tools"})
        described = broker.catalog(run, "describe_server", {"server_id": "tools"})
        refused = []
        for op, request in (("get_tool", {"server_id": "tools", "tool_name": "fail"}),
                            ("get_tool", {"server_id": "tools", "tool_name": "fial"})):  # fmt: skip
            try:
                broker.catalog(run, op, request)
            except HostCallError as error:
                refused.append(error)
        view = broker.catalog(run, "get_tool", {"server_id": "tools", "tool_name": "get_sum"})
        call = _call(run, "fail", {})
        run.finish()
    assert "fail" not in listed and "fail" not in [r["tool_name"] for r in found]
    assert "fail" not in [t["tool_name"] for t in module["tools"]] and described["tool_count"] == len(listed)
    assert refused[0].kind == "denied" and "not allowed by the host's policy" in refused[0].message
    assert refused[1].kind == "not-found" and "'fail'" not in refused[1].message  # never suggested
    assert isinstance(call, HostCallError) and call.kind == "denied"
    assert listed["get-sum"]["needs_approval"] is True and listed["wipe"]["needs_approval"] is True
    assert listed["sleep_for"]["needs_approval"] is False
    assert view["needs_approval"] is True and view["docstring"].split("\n\n")[1].startswith("Needs approval")


def test_pre_approved_tools_do_not_say_they_need_approval(tmp_path: Path) -> None:
    with _broker(tmp_path, policy=Policy(pre_approved=("tools.wipe",))) as broker:
        listed = {t["tool_name"]: t for t in broker.catalog(_run(broker), "list_tools", {"server_id": "tools"})}
    assert listed["wipe"]["needs_approval"] is False


def test_get_tool_takes_a_detail_level_and_defaults_to_full(tmp_path: Path) -> None:
    with _shapes_broker(tmp_path) as broker:
        run = _run(broker)
        full = broker.catalog(run, "get_tool", {"server_id": "tools", "tool_name": "read_file", "detail": "full"})
        short = broker.catalog(run, "get_tool", {"server_id": "tools", "tool_name": "read_file", "detail": "name"})
        try:
            broker.catalog(run, "get_tool", {"server_id": "tools", "tool_name": "read_file", "detail": "all"})
        except HostCallError as error:
            refused = error
        run.finish()
    assert full == _get_tool(broker, "read_file") and "docstring" in full and "input_schema" in full
    assert "docstring" not in short and "input_schema" not in short and short["tool_name"] == "read_file"
    assert refused.kind == "invalid-argument" and "detail must be one of" in refused.message
