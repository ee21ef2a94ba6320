"""Servers → tools, as agent code discovers them: names, detail levels, search, modules.

A `Catalog` is a frozen view for one run: listings are fetched lazily (through
`fetch`) the first time a run needs a server and then never change during it.
Errors are `HostCallError`s, ready to cross into the sandbox.

The run sees what the policy lets it call: a denied tool is left out of every listing,
search, module and suggestion (asking for it by name says it is denied), and a tool that
needs the user's approval says so (``needs_approval`` in its views, a line in its docstring).

Names and queries come from the guest: did-you-mean only runs on names of at most
`MAX_NAME_CHARS` against at most `MAX_SUGGESTION_CANDIDATES` names of a compatible
length, queries are at most `MAX_QUERY_CHARS`, and the run's deadline is checked
between the expensive stages (listing, indexing, ranking, building views).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from wasmexec._runctx.runstate import check_deadline
from wasmexec._runctx.toolhost import MAX_NAME_CHARS, HostCallError
from wasmexec._tools import stubs as _stubs
from wasmexec._tools.config import ServerConfig
from wasmexec._tools.naming import export_names, module_names
from wasmexec._tools.pool import Listing, ServerUnavailable
from wasmexec._tools.search import SearchIndex
from wasmexec._tools.shapes import tool_digest

Detail = Literal["name", "description", "full"]
DETAILS: tuple[Detail, ...] = ("name", "description", "full")
#: Longest search query: a sentence of keywords, not a document.
MAX_QUERY_CHARS = 1_000
#: Names did-you-mean compares with (about 10 µs each, more for long names).
MAX_SUGGESTION_CANDIDATES = 2_000
#: difflib ratio a suggestion needs.
SUGGESTION_CUTOFF = 0.5


@dataclass(frozen=True)
class ToolEntry:
    server_id: str
    tool_name: str
    export_name: str
    tool: dict[str, Any]
    """The tool in MCP wire form (name, description, inputSchema, outputSchema, annotations)."""

    @property
    def description(self) -> str:
        return str(self.tool.get("description") or "")

    @property
    def input_schema(self) -> dict[str, Any]:
        schema = self.tool.get("inputSchema")
        return schema if isinstance(schema, dict) else {"type": "object"}

    @cached_property
    def digest(self) -> str:
        """Names this version of the tool's definition (observed shapes are kept per version)."""
        return tool_digest(self.tool)


Access = Literal["allow", "deny", "approve", "pre_approved"]
"""What the policy says of a tool (`policy.Decision`)."""
#: Asks the policy about a tool: (entry, its server's module name) → its decision.
Decide = Callable[[ToolEntry, str], Access]
#: Finds what results of a tool looked like (`shapes.ObservedReturns`): entry → a schema, or None.
Observed = Callable[[ToolEntry], dict[str, Any] | None]


def did_you_mean(name: str, candidates: Iterable[str]) -> list[str]:
    """Up to three close matches, best first; none for a name longer than any real one."""
    if not name or len(name) > MAX_NAME_CHARS:
        return []
    # difflib's ratio is at most 2 * shorter / (both lengths): other lengths cannot reach the cutoff.
    low, high = (
        len(name) * SUGGESTION_CUTOFF / (2 - SUGGESTION_CUTOFF),
        len(name) * (2 - SUGGESTION_CUTOFF) / SUGGESTION_CUTOFF,
    )
    similar = [candidate for candidate in dict.fromkeys(candidates) if low <= len(candidate) <= high]
    return difflib.get_close_matches(name, similar[:MAX_SUGGESTION_CANDIDATES], n=3, cutoff=SUGGESTION_CUTOFF)


def _suggest(name: str, candidates: Iterable[str]) -> str:
    return _did_you_mean_text(did_you_mean(name, candidates))


def _did_you_mean_text(close: list[str]) -> str:
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _tool_suggestions(name: str, tools: dict[str, ToolEntry]) -> list[str]:
    """Close tools, each once and by its Python name, though either of its names may be the match."""
    forms = {entry.export_name: entry for entry in tools.values()}
    for tool_name, entry in tools.items():
        forms.setdefault(tool_name, entry)  # a Python name wins over another tool's equal protocol name
    return list(dict.fromkeys(forms[match].export_name for match in did_you_mean(name, forms)))


class Catalog:
    """What one run sees of the configured servers."""

    def __init__(
        self,
        servers: dict[str, ServerConfig],
        fetch: Callable[[list[str]], tuple[dict[str, Listing], dict[str, ServerUnavailable]]],
        decide: Decide | None = None,
        observed: Observed | None = None,
    ) -> None:
        """`fetch(server_ids)` returns the listings it got and, per server it could not list, why;
        `decide` is the policy (default: everything allowed); `observed` finds observed result shapes."""
        self.servers = servers
        self._fetch = fetch
        self._decide = decide
        self._observed = observed
        self._listings: dict[str, Listing] = {}
        self._tools: dict[str, dict[str, ToolEntry]] = {}
        self._denied: dict[str, dict[str, ToolEntry]] = {}
        self._access: dict[tuple[str, str], Access] = {}
        self.module_names = module_names(servers)
        self._by_module = {module: server_id for server_id, module in self.module_names.items()}
        self._indexes: dict[tuple[str, ...], SearchIndex[ToolEntry]] = {}

    # -- lookups -------------------------------------------------------------------------
    def server_id(self, server_id: str) -> str:
        """Checks a server id (a module name is accepted too)."""
        if server_id in self.servers:
            return server_id
        if server_id in self._by_module:
            return self._by_module[server_id]
        raise HostCallError(
            "not-found", f"no MCP server {server_id!r} is configured.{_suggest(server_id, self.servers)}",
            "Use discovery.list_servers() to see the configured servers.", what="server", name=server_id,
        )  # fmt: skip

    def listing(self, server_id: str) -> Listing:
        server_id = self.server_id(server_id)
        if server_id not in self._listings:
            listings, problems = self._fetch([server_id])
            self._remember(listings)
            if server_id not in self._listings:
                problem = problems.get(server_id)
                if problem is None:
                    why = f"server {server_id!r} could not be listed"
                    raise HostCallError("unavailable", why, "Try again later.", retryable=True)
                raise HostCallError("unavailable", str(problem), problem.hint, retryable=problem.retryable)
        return self._listings[server_id]

    def tools(self, server_id: str) -> dict[str, ToolEntry]:
        server_id = self.server_id(server_id)
        if server_id not in self._tools:
            tools = self.listing(server_id).tools
            names = export_names(tool["name"] for tool in tools)  # over every tool: names do not move with policy
            entries = [ToolEntry(server_id, tool["name"], names[tool["name"]], tool) for tool in tools]
            for entry in entries:
                self._access[server_id, entry.tool_name] = (
                    self._decide(entry, self.module_names[server_id]) if self._decide else "allow"
                )
            self._tools[server_id] = {e.tool_name: e for e in entries if self.access(e) != "deny"}
            self._denied[server_id] = {e.tool_name: e for e in entries if self.access(e) == "deny"}
        return self._tools[server_id]

    def access(self, entry: ToolEntry) -> Access:
        """What the policy says of a listed tool."""
        return self._access.get((entry.server_id, entry.tool_name), "allow")

    def needs_approval(self, entry: ToolEntry) -> bool:
        """Whether each call is asked of the user first (approved in advance does not count)."""
        return self.access(entry) == "approve"

    def tool(self, server_id: str, name: str) -> ToolEntry:
        """A tool by its protocol name or its Python name; a denied tool is an error that says so."""
        tools = self.tools(server_id)
        found = _by_either_name(tools, name)
        if found is not None:
            return found
        denied = _by_either_name(self._denied[self.server_id(server_id)], name)
        if denied is not None:
            raise HostCallError(
                "denied", f"{denied.server_id}.{denied.tool_name} is not allowed by the host's policy",
                "This tool cannot be used here; the host's policy (--policy) decides.",
            )  # fmt: skip
        hint = _did_you_mean_text(_tool_suggestions(name, tools))
        raise HostCallError(
            "not-found", f"server {server_id!r} has no tool {name!r}.{hint}",
            f"Use discovery.list_tools({server_id!r}) or discovery.search_tools(...).",
            what="tool", server_id=server_id, name=name,
        )  # fmt: skip

    def observed_returns(self, entry: ToolEntry) -> dict[str, Any] | None:
        """A schema of the results seen so far, for a tool without an ``outputSchema``."""
        if self._observed is None or "outputSchema" in entry.tool:
            return None
        return self._observed(entry)

    def docstring(self, entry: ToolEntry) -> str:
        """The tool's docstring as the run sees it: with observed returns and whether it needs approval."""
        return _stubs.tool_docstring(entry.export_name, entry.tool, observed=self.observed_returns(entry),
                                     needs_approval=self.needs_approval(entry))  # fmt: skip

    def _remember(self, listings: dict[str, Listing]) -> None:
        self._listings.update(listings)

    def prefetch(self, server_ids: list[str]) -> None:
        """Fetches the listings not yet known, in parallel (failures are the fetcher's to report)."""
        missing = [server_id for server_id in server_ids if server_id not in self._listings]
        if missing:
            self._remember(self._fetch(missing)[0])

    # -- views -------------------------------------------------------------------------
    def server_view(self, server_id: str, *, describe: bool = False) -> dict[str, Any]:
        server_id = self.server_id(server_id)
        listing = self._listings.get(server_id)
        view: dict[str, Any] = {
            "server_id": server_id,
            "server_name": listing.server_name if listing else server_id,
            "module": self.module_names[server_id],
        }
        if describe:
            listing = self.listing(server_id)
            view["server_name"] = listing.server_name
            view.update({"description": self.servers[server_id].description or listing.title or "",
                         "version": listing.server_version, "instructions": listing.instructions or "",
                         "tool_count": len(self.tools(server_id))})  # fmt: skip
        return view

    def tool_view(self, entry: ToolEntry, detail: Detail, *, with_server: bool = False) -> dict[str, Any]:
        view: dict[str, Any] = {"server_id": entry.server_id} if with_server else {}
        view.update({"tool_name": entry.tool_name, "export_name": entry.export_name})
        if detail in ("description", "full"):
            view["description"] = entry.description
            view["annotations"] = entry.tool.get("annotations") or {}
            view["needs_approval"] = self.needs_approval(entry)
        if detail == "full":
            view["input_schema"] = entry.input_schema
            view["output_schema"] = entry.tool.get("outputSchema")
            view["signature"] = _stubs.tool_signature(entry.export_name, entry.tool)
            view.update(_stubs.tool_returns(entry.export_name, entry.tool))
            observed = self.observed_returns(entry)
            if observed is not None:
                view["observed_returns"] = _stubs.tool_returns(entry.export_name, entry.tool, observed)
        return view

    def search(self, query: str, detail: Detail, server_id: str | None, limit: int) -> dict[str, Any]:
        if len(query) > MAX_QUERY_CHARS:
            raise HostCallError(
                "invalid-argument", f"the query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}",
                "Search with a few keywords (names, verbs, nouns), not a document.",
            )  # fmt: skip
        server_ids = [self.server_id(server_id)] if server_id else list(self.servers)
        self.prefetch(server_ids)
        key = tuple(sid for sid in server_ids if sid in self._listings)
        if key not in self._indexes:
            check_deadline("search_tools")
            self._indexes[key] = SearchIndex([entry for sid in key for entry in self.tools(sid).values()])
        check_deadline("search_tools")
        ranked = self._indexes[key].search(query, limit, check=lambda: check_deadline("search_tools"))
        return {"query": query, "results": [self.tool_view(entry, detail, with_server=True) for _, entry in ranked]}

    def module(self, module_name: str) -> dict[str, Any]:
        """Everything the guest needs to build `servers.<module_name>`."""
        server_id = self.server_id(module_name)
        listing = self.listing(server_id)
        tools = []
        for entry in self.tools(server_id).values():
            check_deadline(f"describing server {server_id!r}")
            tools.append({
                "tool_name": entry.tool_name, "export_name": entry.export_name, "description": entry.description,
                "parameters": _stubs.tool_parameters(entry.tool),
                "returns": _stubs.tool_returns(entry.export_name, entry.tool)["return_type"],
                "docstring": self.docstring(entry),
            })  # fmt: skip
        return {
            "server_id": server_id, "module": self.module_names[server_id], "server_name": listing.server_name,
            "server_version": listing.server_version, "description": self.servers[server_id].description,
            "tools": tools,
        }  # fmt: skip


def _by_either_name(tools: dict[str, ToolEntry], name: str) -> ToolEntry | None:
    if name in tools:
        return tools[name]
    return next((entry for entry in tools.values() if entry.export_name == name), None)
