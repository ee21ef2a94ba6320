"""`wasmexec tools …`: look at the configured servers' tools from the command line.

    wasmexec tools list [SERVER]        tools of every server (or one)
    wasmexec tools search QUERY         ranked like discovery.search_tools
    wasmexec tools show SERVER TOOL     signature, docstring and schemas
    wasmexec tools stubs SERVER         a Python module of TypedDicts and signatures
    wasmexec tools refresh [SERVER]     re-list now, replacing the cached schemas

Exit codes: 0 fine, 1 a server or tool could not be found or reached, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

EXIT_OK, EXIT_FAILED = 0, 1
_TIMEOUT_S = 60.0


def add_tools_parser(
    commands: Any, add_config: Callable[[argparse.ArgumentParser], None], add_cache: Callable[..., None]
) -> None:
    tools = commands.add_parser("tools", help="list, search and show the tools of the configured MCP servers")
    verbs = tools.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="tools of every server, or of one")
    listing.add_argument("server", nargs="?")
    search = verbs.add_parser("search", help="search tools by name and description")
    search.add_argument("query")
    search.add_argument("--server")
    search.add_argument("--limit", type=int, default=10)
    show = verbs.add_parser("show", help="one tool: signature, docstring, schemas")
    show.add_argument("server")
    show.add_argument("tool")
    stubs = verbs.add_parser("stubs", help="print a Python stub module for a server")
    stubs.add_argument("server")
    refresh = verbs.add_parser("refresh", help="re-list servers now (replaces cached schemas)")
    refresh.add_argument("server", nargs="?")
    for parser in (listing, search, show, stubs, refresh):
        add_config(parser)
        add_cache(parser)
        if parser is not stubs:
            parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def command_tools(args: argparse.Namespace) -> int:
    from wasmexec._cli.main import UsageError, load_servers, open_broker
    from wasmexec._toolhost import HostCallError

    config = load_servers(args)
    if config is None or not config.servers:
        raise UsageError("no MCP servers are configured: pass --config PATH (an mcpServers JSON file)")
    with open_broker(args, config) as broker:
        try:
            return _VERBS[args.verb](broker, args)
        except HostCallError as exc:
            print(f"wasmexec: {exc.message}", file=sys.stderr)
            return EXIT_FAILED


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n", 1)[0][:80]


def _catalog(broker: Any) -> Any:
    return broker.catalog_for(None)


def _print(args: argparse.Namespace, value: Any, text: Callable[[], str]) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False) if args.json else text())


def _list(broker: Any, args: argparse.Namespace) -> int:
    catalog = _catalog(broker)
    server_ids = [catalog.server_id(args.server)] if args.server else list(catalog.servers)
    warnings: list[str] = []
    listings = broker.fetch_listings(server_ids, _TIMEOUT_S, warnings)
    catalog.prefetch(list(listings))
    value = {sid: [catalog.tool_view(e, "description") for e in catalog.tools(sid).values()] for sid in listings}

    def text() -> str:
        lines = []
        for server_id, tools in value.items():
            lines.append(f"{server_id} (servers.{catalog.module_names[server_id]}): {len(tools)} tools")
            lines += [f"  {t['export_name']:<32} {_first_line(t['description'])}" for t in tools]
        return "\n".join(lines)

    _print(args, value, text)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return EXIT_FAILED if warnings else EXIT_OK


def _search(broker: Any, args: argparse.Namespace) -> int:
    found = _catalog(broker).search(args.query, "description", args.server, max(1, args.limit))

    def text() -> str:
        return "\n".join(
            f"{r['server_id']}.{r['export_name']:<32} {_first_line(r['description'])}" for r in found["results"]
        )

    _print(args, found, text)
    return EXIT_OK


def _show(broker: Any, args: argparse.Namespace) -> int:
    from wasmexec._tools import stubs as _stubs

    catalog = _catalog(broker)
    entry = catalog.tool(args.server, args.tool)
    value = {**catalog.tool_view(entry, "full", with_server=True),
             "docstring": _stubs.tool_docstring(entry.export_name, entry.tool)}  # fmt: skip

    def text() -> str:
        schema = json.dumps(entry.input_schema, indent=2)
        return f"{value['signature']}\n\n{value['docstring']}\n\ninput schema:\n{schema}"

    _print(args, value, text)
    return EXIT_OK


def _stubs_command(broker: Any, args: argparse.Namespace) -> int:
    from wasmexec._tools import stubs as _stubs

    catalog = _catalog(broker)
    server_id = catalog.server_id(args.server)
    tools = [(entry.export_name, entry.tool) for entry in catalog.tools(server_id).values()]
    print(_stubs.module_stub(catalog.module_names[server_id], server_id, tools))
    return EXIT_OK


def _refresh(broker: Any, args: argparse.Namespace) -> int:
    catalog = _catalog(broker)
    server_ids = [catalog.server_id(args.server)] if args.server else list(catalog.servers)
    outcome = broker.refresh(server_ids)
    _print(args, outcome, lambda: "\n".join(f"{sid}: {status}" for sid, status in outcome.items()))
    return EXIT_OK if all(status == "ok" for status in outcome.values()) else EXIT_FAILED


_VERBS: dict[str, Callable[[Any, argparse.Namespace], int]] = {
    "list": _list, "search": _search, "show": _show, "stubs": _stubs_command, "refresh": _refresh,
}  # fmt: skip
