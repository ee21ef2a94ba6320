"""Builds the `servers.<module>` modules: one async function per tool, made on import.

Each function accepts keyword arguments or a single dict, calls the host without
blocking (so `asyncio.gather` runs calls concurrently), and carries a docstring
and `__signature__` generated from the tool's schemas, so `help()` shows them.

A call returns the result unwrapped (structuredContent, a lone text block as a
``str``, else the whole result; ``isError`` raises ToolCallError). ``raw=True``
returns the whole MCP result instead, ``{"content": [...], "structuredContent": ...,
"isError": bool}``, and does not raise on ``isError``; for a tool with its own
``raw`` parameter, ``raw=`` is the tool's.

Each module also has ``resources`` (unless a tool is called that): the server's MCP
resources, read through the same host path as tool calls.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import inspect
import json
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from codemode import _host, errors

PACKAGE = "servers"
#: The keyword that asks for the whole MCP result.
RAW = "raw"


def _parameter(spec: dict[str, Any]) -> inspect.Parameter | None:
    name = spec.get("python_name")
    if not name:
        return None
    default: Any = inspect.Parameter.empty
    if not spec.get("required"):
        default = spec.get("default")
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=spec["annotation"])


def _takes_raw(tool: dict[str, Any]) -> bool:
    """Whether ``raw=`` is ours (the whole result), not one of the tool's own arguments."""
    return not any(spec.get("name") == RAW for spec in tool["parameters"])


def _signature(tool: dict[str, Any]) -> inspect.Signature:
    parameters = [p for p in map(_parameter, tool["parameters"]) if p is not None]
    if _takes_raw(tool):
        parameters.append(inspect.Parameter(RAW, inspect.Parameter.KEYWORD_ONLY, default=False, annotation="bool"))
    if any(not spec.get("python_name") for spec in tool["parameters"]):
        # Names that are not identifiers (e.g. "max-results") go through **{"max-results": …} or a dict.
        taken = {p.name for p in parameters}
        name = next(n for n in ("extra", "extra_", "extra__") if n not in taken)
        parameters.append(inspect.Parameter(name, inspect.Parameter.VAR_KEYWORD, annotation="Any"))
    return inspect.Signature(parameters, return_annotation=tool.get("returns", "Any"))


def _arguments(export_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    if not args:
        return kwargs
    if len(args) == 1 and isinstance(args[0], dict):
        return {**args[0], **kwargs}
    raise TypeError(f"{export_name}() takes keyword arguments or a single dict, not positional arguments")


def make_tool_function(server_id: str, module: str, tool: dict[str, Any]) -> Any:
    """An async function that calls one tool by its original protocol name."""
    tool_name, export_name = tool["tool_name"], tool["export_name"]
    takes_raw = _takes_raw(tool)

    async def call_tool(*args: Any, **kwargs: Any) -> Any:
        raw = bool(kwargs.pop(RAW, False)) if takes_raw else False
        arguments = _arguments(export_name, args, kwargs)
        loop = asyncio.get_running_loop()
        kind = _host.CallKind.TOOL_RAW if raw else _host.CallKind.TOOL
        handle = _host.start_call(server_id, tool_name, arguments, kind)
        text = await loop.watch_host_call(handle)  # type: ignore[attr-defined]
        return json.loads(text)

    call_tool.__name__ = call_tool.__qualname__ = export_name
    call_tool.__module__ = f"{PACKAGE}.{module}"
    call_tool.__doc__ = tool.get("docstring") or tool.get("description") or ""
    call_tool.__signature__ = _signature(tool)  # type: ignore[attr-defined]
    call_tool.tool_name = tool_name  # type: ignore[attr-defined]
    return call_tool


#: What a resource listing returns (an alias: `Resources.list` hides the builtin in the class).
Entries = list[dict[str, Any]]


class Resources:
    """The MCP resources of one server; each method is a call (counted, checked and audited like one).

    Example::

        import servers.everything as ev
        found = await ev.resources.list()          # [{"uri", "name", "mimeType"?, "description"?}, ...]
        text = await ev.resources.read(found[0]["uri"])
        shapes = await ev.resources.templates()    # [{"uriTemplate", "name", ...}]
    """

    def __init__(self, server_id: str) -> None:
        self._server_id = server_id

    def __repr__(self) -> str:
        return f"<resources of MCP server {self._server_id!r}>"

    async def _ask(self, kind: Any, arguments: dict[str, Any]) -> Any:
        handle = _host.start_call(self._server_id, "", arguments, kind)
        text = await asyncio.get_running_loop().watch_host_call(handle)  # type: ignore[attr-defined]
        return json.loads(text)

    async def list(self) -> Entries:
        """Every resource the server lists (all pages): ``[{"uri", "name", "mimeType"?, ...}]``."""
        return await self._ask(_host.CallKind.LIST_RESOURCES, {})  # type: ignore[no-any-return]

    async def templates(self) -> Entries:
        """Every resource template (all pages): ``[{"uriTemplate", "name", "description"?, ...}]``."""
        return await self._ask(_host.CallKind.LIST_RESOURCE_TEMPLATES, {})  # type: ignore[no-any-return]

    async def read(self, uri: str) -> Any:
        """The resource at `uri`: its text when it is one text, else its contents,
        ``[{"uri", "mimeType"?, "text" or "blob" (base64)}]``."""
        if not isinstance(uri, str):
            raise TypeError(f"uri must be a string, not {type(uri).__name__}")
        return await self._ask(_host.CallKind.READ_RESOURCE, {"uri": uri})


def build_module(description: dict[str, Any]) -> ModuleType:
    """A `servers.<module>` module from the host's description of a server."""
    name = f"{PACKAGE}.{description['module']}"
    module = ModuleType(name, description.get("description") or f"Tools of MCP server {description['server_id']!r}.")
    module.__meta__ = {  # type: ignore[attr-defined]
        "server_id": description["server_id"],
        "server_name": description["server_name"],
        "server_version": description["server_version"],
        "tools": [
            {"tool_name": t["tool_name"], "export_name": t["export_name"], "description": t["description"]}
            for t in description["tools"]
        ],
    }
    exported = []
    for tool in description["tools"]:
        setattr(module, tool["export_name"], make_tool_function(description["server_id"], description["module"], tool))
        exported.append(tool["export_name"])
    if "resources" not in exported:  # a tool of that name wins
        module.resources = Resources(description["server_id"])  # type: ignore[attr-defined]
    module.__all__ = sorted(exported)  # type: ignore[attr-defined]
    module.__getattr__ = _missing_tool(description)  # type: ignore[method-assign]  # PEP 562 module __getattr__
    return module


def _missing_tool(description: dict[str, Any]) -> Any:
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            _host.catalog("get_tool", {"server_id": description["server_id"], "tool_name": name})  # raises
        except errors.ApprovalDeniedError as exc:
            # A tool the policy denies is not listed, but calling it is an attempt the host traces and
            # audits: the function's call is refused there, with this error.
            tool = {"tool_name": name, "export_name": name, "parameters": [], "docstring": str(exc)}
            return make_tool_function(description["server_id"], description["module"], tool)
        raise errors.ToolNotFoundError(f"server {description['server_id']!r} has no tool {name!r}")

    return __getattr__


class _ServersLoader(importlib.abc.Loader):
    def __init__(self, description: dict[str, Any]) -> None:
        self.description = description

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return build_module(self.description)

    def exec_module(self, module: ModuleType) -> None:
        pass


class ServersFinder(importlib.abc.MetaPathFinder):
    """Answers `import servers.<module>` from the host's catalog."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(PACKAGE + "."):
            return None
        module = fullname[len(PACKAGE) + 1 :]
        if "." in module:
            return None
        description = _host.catalog("module", {"module": module})
        return importlib.machinery.ModuleSpec(fullname, _ServersLoader(description))


def install() -> None:
    """Registers the finder (the `servers` package itself is a plain namespace)."""
    package = ModuleType(PACKAGE, "One module per configured MCP server: `import servers.<name>`.")
    package.__path__ = []  # a package, so `import servers.x` reaches the finder
    sys.modules[PACKAGE] = package
    sys.meta_path.append(ServersFinder())
