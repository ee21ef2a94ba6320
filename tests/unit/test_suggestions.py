"""Did-you-mean: a tool that is not found names each close tool once, by the name code should use."""

from __future__ import annotations

from typing import Any

import pytest

from wasmexec._runctx.toolhost import HostCallError
from wasmexec._tools.catalog import Catalog, did_you_mean
from wasmexec._tools.config import ServerConfig
from wasmexec._tools.pool import Listing


def _catalog(*tool_names: str) -> Catalog:
    tools: list[dict[str, Any]] = [{"name": name, "inputSchema": {"type": "object"}} for name in tool_names]
    listing = Listing("srv", "1.0", None, None, "2025-06-18", tools)
    servers = {"srv": ServerConfig("srv", "stdio", command="srv")}
    return Catalog(servers, lambda ids: ({"srv": listing}, {}))


def _not_found(catalog: Catalog, name: str) -> str:
    with pytest.raises(HostCallError) as caught:
        catalog.tool("srv", name)
    return str(caught.value)


def test_a_tool_whose_protocol_name_is_its_python_name_is_suggested_once() -> None:
    message = _not_found(_catalog("read_file", "write_file"), "read_fil")
    assert message.count("'read_file'") == 1, message


def test_when_both_names_of_one_tool_match_only_the_python_name_is_suggested() -> None:
    message = _not_found(_catalog("read-text-file"), "read_text_fil")
    assert "'read_text_file'" in message and "'read-text-file'" not in message, message


def test_different_tools_are_all_suggested_best_first() -> None:
    message = _not_found(_catalog("get-item", "get_items"), "get_itm")
    assert "Did you mean 'get_item', 'get_items'?" in message, message


def test_did_you_mean_never_repeats_a_candidate() -> None:
    assert sorted(did_you_mean("alpha", ["alpha1", "alpha1", "alpha2"])) == ["alpha1", "alpha2"]
