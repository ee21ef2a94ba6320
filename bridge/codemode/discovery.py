"""Find the tools of the configured MCP servers, without loading every schema.

    from codemode import discovery
    discovery.list_servers()                      # [{server_id, server_name, module}]
    discovery.search_tools("create issue")        # {query, results: [{server_id, tool_name, export_name, ...}]}
    discovery.get_tool("github", "create_issue")  # full detail: schemas, Python signature, docstring
    discovery.packages()                          # [{name, version}]: what can be imported beyond the stdlib

Then call a tool as a Python function: ``import servers.github as gh; await gh.create_issue(...)``.

Detail levels: ``"name"`` (tool_name, export_name), ``"description"`` (+ description,
annotations, needs_approval), ``"full"`` (+ input_schema, output_schema, signature,
return_type and typed_dicts: the output schema as a TypedDict; and observed_returns, the
shape of earlier results, for a tool without an output schema). Tools the host's policy
denies are not listed.
"""

from __future__ import annotations

from typing import Any

from codemode import _files, _host

__all__ = [
    "describe_server", "get_tool", "list_servers", "list_skills", "list_tools", "packages", "search_tools",
    "spec_version",
]  # fmt: skip

#: The version of this discovery API (declared here, served by ``__getattr__`` below).
spec_version: str


def __getattr__(name: str) -> Any:
    """``spec_version``: the version of this discovery API, e.g. ``"1.0"``.

    The host defines it; it is asked on first use, because this module is imported
    when the sandbox is built, where no host exists.
    """
    if name != "spec_version":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    version: str = _host.catalog("spec_version", {})
    globals()["spec_version"] = version  # later reads find it without asking again
    return version


def __dir__() -> list[str]:
    return sorted({*globals(), "spec_version"})


def list_servers() -> list[dict[str, Any]]:
    """Every configured server: ``[{"server_id", "server_name", "module"}]``.

    Example: ``[s["server_id"] for s in discovery.list_servers()]``
    """
    return _host.catalog("list_servers", {})  # type: ignore[no-any-return]


def describe_server(server_id: str) -> dict[str, Any]:
    """One server: id, name, module, description, version, instructions, tool_count.

    Example: ``discovery.describe_server("github")["tool_count"]``
    """
    return _host.catalog("describe_server", {"server_id": server_id})  # type: ignore[no-any-return]


def list_tools(server_id: str, detail: str = "description") -> list[dict[str, Any]]:
    """The tools of one server at a detail level ("name", "description" or "full").

    Example: ``[t["export_name"] for t in discovery.list_tools("github", detail="name")]``
    """
    return _host.catalog("list_tools", {"server_id": server_id, "detail": detail})  # type: ignore[no-any-return]


def get_tool(server_id: str, tool_name: str, detail: str = "full") -> dict[str, Any]:
    """One tool, by default at full detail: schemas, Python ``signature``, ``return_type`` and ``docstring``.

    ``tool_name`` may be the protocol name or the Python name; ``detail`` may also be "name" or
    "description", as in `list_tools`.
    Example: ``print(discovery.get_tool("github", "create_issue")["signature"])``
    """
    request = {"server_id": server_id, "tool_name": tool_name, "detail": detail}
    return _host.catalog("get_tool", request)  # type: ignore[no-any-return]


def search_tools(
    query: str, detail: str = "description", server_id: str | None = None, limit: int = 10
) -> dict[str, Any]:
    """Ranks tools by how well their name and description match ``query``.

    Exact names first, then word and substring matches, then fuzzy ones.
    Example: ``discovery.search_tools("send email", limit=3)["results"]``
    """
    request: dict[str, Any] = {"query": query, "detail": detail, "limit": limit}
    if server_id is not None:
        request["server_id"] = server_id
    return _host.catalog("search_tools", request)  # type: ignore[no-any-return]


def list_skills() -> list[dict[str, str]]:
    """Saved helpers you can import: ``[{"name", "doc"}]`` (doc: the module docstring's first paragraph).

    A skill is a ``.py`` file in /skills (read-only, from the operator) or /workspace/skills
    (yours, kept across runs of a session); /skills wins a name clash.
    Example: ``[s["name"] for s in discovery.list_skills()]``, then ``from skills import csvtools``.
    """
    return _files.list_skills()


def packages() -> list[dict[str, str]]:
    """The installed packages beyond the standard library: ``[{"name", "version"}]``, sorted by name.

    Empty in the default sandbox (the standard library only); the science sandbox has numpy,
    pandas, scipy, scikit-learn (``import sklearn``), statsmodels, matplotlib and more; a
    profile built with ``wasmexec build --profile NAME --requirements FILE`` adds its own.
    Example: ``{p["name"]: p["version"] for p in discovery.packages()}.get("pandas")``
    """
    found = sorted({*_PACKAGES, *_files.profile_packages}, key=lambda item: (item[0].lower(), item[1]))
    return [{"name": name, "version": version} for name, version in found]


def _installed() -> tuple[tuple[str, str], ...]:
    """The distributions on sys.path, from their metadata.

    Read when this module is imported, which is when the sandbox image is built: the
    snapshot keeps the answer, so a run pays nothing for it (a scan costs about 0.3 s).
    """
    try:
        from importlib import metadata

        found = {(dist.metadata["Name"], dist.version) for dist in metadata.distributions()}
    except Exception:  # a broken metadata file must not break the bridge's import
        return ()
    found = {(name, version) for name, version in found if isinstance(name, str) and isinstance(version, str)}
    return tuple(sorted(found, key=lambda item: (item[0].lower(), item[1])))


_PACKAGES = _installed()
