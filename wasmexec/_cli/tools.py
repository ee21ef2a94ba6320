"""`wasmexec tools …`: look at the configured servers' tools from the command line.

    wasmexec tools list [SERVER]        tools of every server (or one)
    wasmexec tools search QUERY         ranked like discovery.search_tools
    wasmexec tools show SERVER TOOL     signature, docstring and schemas
    wasmexec tools stubs SERVER         a Python module of TypedDicts and signatures
    wasmexec tools refresh [SERVER]     re-list now, replacing the cached schemas

Exit codes: 0 fine, 1 a server or tool could not be found or reached, 2 usage error.
The servers' stderr goes to the server log unless --server-stderr asks for it here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wasmexec._cli.options import (
    EXIT_CODE_FAILED,
    EXIT_OK,
    TOOLS_ENVIRONMENT_HELP,
    UsageError,
    add_config_option,
    add_server_stderr_option,
    int_option,
    load_servers,
    opened_broker,
)

if TYPE_CHECKING:
    from wasmexec._tools.broker import Broker
    from wasmexec._tools.catalog import Catalog

#: How long listing the servers may take: a cold start of several npm servers takes seconds.
LIST_TIMEOUT_S = 60.0


def add_tools_parser(commands: Any) -> None:
    tools = commands.add_parser("tools", help="list, search and show the tools of the configured MCP servers",
                                description="Look at the tools of the configured MCP servers.")  # fmt: skip
    verbs = tools.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="tools of every server, or of one")
    listing.add_argument("server", nargs="?", metavar="SERVER", help="only this server")
    search = verbs.add_parser("search", help="search tools by name and description")
    search.add_argument("query", metavar="QUERY", help="words to look for")
    search.add_argument("--server", metavar="SERVER", help="only tools of this server")
    search.add_argument("--limit", type=int_option(1), metavar="N",
                        help="results to show (default: as many as discovery.search_tools shows)")  # fmt: skip
    show = verbs.add_parser("show", help="one tool: signature, docstring, schemas")
    show.add_argument("server", metavar="SERVER", help="the server id")
    show.add_argument("tool", metavar="TOOL", help="the tool's protocol or Python name")
    stubs = verbs.add_parser("stubs", help="print a Python stub module for a server")
    stubs.add_argument("server", metavar="SERVER", help="the server id")
    refresh = verbs.add_parser("refresh", help="re-list servers now (replaces cached schemas)")
    refresh.add_argument("server", nargs="?", metavar="SERVER", help="only this server")
    for verb, parser in (("list", listing), ("search", search), ("show", show), ("stubs", stubs),
                         ("refresh", refresh)):  # fmt: skip
        if parser is not stubs:
            parser.add_argument("--json", action="store_true", help="print JSON instead of text")
        add_config_option(parser)
        add_server_stderr_option(parser)
        parser.epilog = TOOLS_ENVIRONMENT_HELP
        parser.set_defaults(handler=command_tools, parser=parser, run_verb=_VERBS[verb])


def command_tools(args: argparse.Namespace) -> int:
    from wasmexec._runctx.toolhost import HostCallError

    config = load_servers(args)
    if config is None:
        raise UsageError("no MCP servers are configured: pass --config PATH (an mcpServers JSON file)")
    if not config.servers:
        skipped = " (every entry was skipped: see the warnings above)" if config.problems else ""
        raise UsageError(f"{config.source} has no MCP server to use{skipped}")
    with opened_broker(args, config) as broker:
        try:
            code: int = args.run_verb(broker, args)
            return code
        except HostCallError as exc:
            print(f"wasmexec: {exc.message}", file=sys.stderr)
            return EXIT_CODE_FAILED


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n", 1)[0][:80]


def _catalog(broker: Broker) -> Catalog:
    return broker.catalog_for(None)


def _print(args: argparse.Namespace, value: Any, text: Callable[[], str]) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False) if args.json else text())


def _list(broker: Broker, args: argparse.Namespace) -> int:
    catalog = _catalog(broker)
    server_ids = [catalog.server_id(args.server)] if args.server else list(catalog.servers)
    warnings: list[str] = []
    listings = broker.fetch_listings(server_ids, LIST_TIMEOUT_S, warnings)
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
    return EXIT_CODE_FAILED if warnings else EXIT_OK


def _search(broker: Broker, args: argparse.Namespace) -> int:
    from wasmexec._tools.broker import DEFAULT_SEARCH_LIMIT

    found = _catalog(broker).search(args.query, "description", args.server, args.limit or DEFAULT_SEARCH_LIMIT)

    def text() -> str:
        return "\n".join(
            f"{r['server_id']}.{r['export_name']:<32} {_first_line(r['description'])}" for r in found["results"]
        )

    _print(args, found, text)
    return EXIT_OK


def _show(broker: Broker, args: argparse.Namespace) -> int:
    catalog = _catalog(broker)
    entry = catalog.tool(args.server, args.tool)
    value = {**catalog.tool_view(entry, "full", with_server=True), "docstring": catalog.docstring(entry)}

    def text() -> str:
        schema = json.dumps(entry.input_schema, indent=2)
        return f"{value['signature']}\n\n{value['docstring']}\n\ninput schema:\n{schema}"

    _print(args, value, text)
    return EXIT_OK


def _stubs_command(broker: Broker, args: argparse.Namespace) -> int:
    from wasmexec._tools import stubs as _stubs

    catalog = _catalog(broker)
    server_id = catalog.server_id(args.server)
    entries = catalog.tools(server_id).values()
    tools = [(entry.export_name, entry.tool) for entry in entries]
    observed = {entry.export_name: catalog.observed_returns(entry) for entry in entries}
    print(_stubs.module_stub(catalog.module_names[server_id], server_id, tools, observed))
    return EXIT_OK


def _refresh(broker: Broker, args: argparse.Namespace) -> int:
    catalog = _catalog(broker)
    server_ids = [catalog.server_id(args.server)] if args.server else list(catalog.servers)
    outcome = broker.refresh(server_ids)
    _print(args, outcome, lambda: "\n".join(f"{sid}: {status}" for sid, status in outcome.items()))
    return EXIT_OK if all(status == "ok" for status in outcome.values()) else EXIT_CODE_FAILED


_VERBS: dict[str, Callable[[Broker, argparse.Namespace], int]] = {
    "list": _list, "search": _search, "show": _show, "stubs": _stubs_command, "refresh": _refresh,
}  # fmt: skip
