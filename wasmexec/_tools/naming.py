"""How MCP server ids and tool names become Python module and function names.

- server id → module: lowercase, every run of characters outside ``[a-z0-9]`` → ``_``
  (``google-drive`` → ``google_drive``).
- tool name → function: split on ``.``, ``_``, ``-`` (and any other non-alphanumeric
  character) and on camelCase boundaries, join with ``_``, lowercase
  (``getUser``, ``get.user``, ``get-user`` → ``get_user``; ``fetch_HTTPResponse`` →
  ``fetch_http_response``).
- either: a leading digit gets a ``_`` prefix, a Python keyword a ``_`` suffix.
- collisions: the alphabetically first original name (case-insensitive) keeps the name,
  the others get ``__2``, ``__3`` … in that order.

Calls always use the original protocol name.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable

_CAMEL_LOWER_UPPER = re.compile(r"([a-z0-9])([A-Z])")
_CAMEL_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


def _python_safe(name: str, fallback: str) -> str:
    name = name.strip("_") or fallback
    if name[0].isdigit():
        name = "_" + name
    if keyword.iskeyword(name):
        name += "_"
    return name


def module_base_name(server_id: str) -> str:
    """The module name of a server id, before collision handling."""
    return _python_safe(_NOT_ALNUM.sub("_", server_id.lower()), "server")


def function_base_name(tool_name: str) -> str:
    """The function name of a tool name, before collision handling."""
    spaced = _CAMEL_ACRONYM.sub(r"\1_\2", _CAMEL_LOWER_UPPER.sub(r"\1_\2", tool_name))
    return _python_safe(_NOT_ALNUM.sub("_", spaced.lower()), "tool")


def _unique(originals: Iterable[str], base: dict[str, str]) -> dict[str, str]:
    taken: set[str] = set()
    names: dict[str, str] = {}
    for original in sorted(originals, key=lambda name: (base[name], name.lower(), name)):
        candidate, counter = base[original], 1
        while candidate in taken:
            counter += 1
            candidate = f"{base[original]}__{counter}"
        taken.add(candidate)
        names[original] = candidate
    return names


def module_names(server_ids: Iterable[str]) -> dict[str, str]:
    """server id → unique module name."""
    ids = list(server_ids)
    return _unique(ids, {server_id: module_base_name(server_id) for server_id in ids})


def export_names(tool_names: Iterable[str]) -> dict[str, str]:
    """tool name → unique function name within one server."""
    names = list(tool_names)
    return _unique(names, {name: function_base_name(name) for name in names})
