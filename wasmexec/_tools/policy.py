"""Which tool calls a run may make: allow and deny globs, approvals, rate limits.

A policy file is TOML or JSON::

    allow = ["github.*", "time.*"]          # globs over "server.tool"; default: everything
    deny = ["github.delete_*"]              # deny wins over allow
    require_approval = ["filesystem.*"]     # besides every tool annotated destructiveHint
    approve_destructive = true              # ask before destructiveHint tools (default true)
    pre_approved = ["filesystem.write_*"]   # approved in advance, like the CLI's --approve
    max_tool_calls = 50                     # per run
    pii = "tokenize"                        # PII in tool results: off (default), tokenize or redact
    [rate_limits]                           # calls per second, per server
    github = 5

Globs (`fnmatch`, case-sensitive) match a tool by any of the names users see for it:
the server id or its Python module name, then ``.``, then the tool's protocol name or
its Python function name. For the tool ``get-sum`` of the server ``my-server`` (shown by
``wasmexec tools list`` as ``my_server.get_sum``) each of ``my-server.get-sum``,
``my-server.get_sum``, ``my_server.get-sum`` and ``my_server.get_sum`` matches. A glob
that matches no tool of the configured servers is almost always a typo: the broker warns
about each one (`Policy.unmatched_globs`).
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from wasmexec._exceptions import ConfigError
from wasmexec._redact import PII_MODES, PiiMode

Decision = Literal["allow", "deny", "approve", "pre_approved"]
"""allow; deny; approve (ask the user first); pre_approved (would need approval, approved in advance)."""

#: The settings that hold globs, in the order warnings name them.
GLOB_SETTINGS = ("allow", "deny", "require_approval", "pre_approved")
_WILDCARD = re.compile(r"[*?\[]")


def tool_names(server_id: str, tool_name: str, export_name: str | None = None, module: str | None = None) -> set[str]:
    """Every name of one tool a glob may match: server id or module, then protocol or Python name."""
    servers = {server_id, module or server_id}
    tools = {tool_name, export_name or tool_name}
    return {f"{server}.{tool}" for server in servers for tool in tools}


@dataclass(frozen=True)
class Policy:
    """What tool calls are allowed, denied or need the user's approval."""

    allow: tuple[str, ...] = ("*",)
    """Globs over ``server.tool`` that may be called."""
    deny: tuple[str, ...] = ()
    """Globs that may never be called (wins over `allow`)."""
    require_approval: tuple[str, ...] = ()
    """Globs that need the user's approval before each call."""
    approve_destructive: bool = True
    """Whether tools annotated ``destructiveHint: true`` need approval."""
    pre_approved: tuple[str, ...] = ()
    """Globs approved in advance (the CLI's ``--approve``); such calls are reported as approved."""
    rate_limits: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    """Server id → calls per second."""
    max_tool_calls: int | None = None
    """A per-run cap on top of the run's limits."""
    pii: PiiMode = "off"
    """PII in tool results: ``tokenize`` (tokens the code can pass back), ``redact``, or ``off``."""

    def decide(
        self,
        server_id: str,
        tool_name: str,
        annotations: dict[str, Any] | None = None,
        *,
        export_name: str | None = None,
        module: str | None = None,
    ) -> Decision:
        """What to do with a call, matching every name of the tool (see `tool_names`)."""
        names = tool_names(server_id, tool_name, export_name, module)
        if _matches(names, self.deny) or not _matches(names, self.allow):
            return "deny"
        destructive = bool((annotations or {}).get("destructiveHint")) and self.approve_destructive
        if destructive or _matches(names, self.require_approval):
            return "pre_approved" if _matches(names, self.pre_approved) else "approve"
        return "allow"

    def unmatched_globs(
        self, names: Collection[str], prefixes: Collection[str] = (), *, complete: bool = True
    ) -> list[str]:
        """A warning for each glob that matches none of `names` (from `tool_names`).

        With ``complete=False`` the names cover only some servers, so only globs that cannot
        match any configured server are reported: a glob with no ``.``, or whose literal
        start names none of `prefixes` (server ids and module names). The default allow-all
        ``*`` is never reported.
        """
        warnings = []
        for setting in GLOB_SETTINGS:
            for glob in getattr(self, setting):
                if glob == "*" or any(fnmatch.fnmatchcase(name, glob) for name in names):
                    continue
                if complete or _names_no_server(glob, prefixes):
                    warnings.append(f"policy {setting} glob {glob!r} matches no tool of the configured servers")
        return warnings


class UnmatchedGlobs:
    """Finds the policy's globs that match no tool as server listings become known; each warning once.

    Until every configured server has been listed, only globs that can match no configured
    server are reported (`Policy.unmatched_globs` with ``complete=False``). Thread-safe: runs
    on several threads report their listings.
    """

    def __init__(self, policy: Policy, modules: Mapping[str, str]) -> None:
        """`modules`: every configured server id → its Python module name."""
        self._policy = policy
        self._modules = modules
        self._globs = any(glob != "*" for setting in GLOB_SETTINGS for glob in getattr(policy, setting))
        self._names: dict[str, set[str]] = {}  # server id → every name of its tools
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def wants(self, server_id: str) -> bool:
        """Whether the tools of `server_id` are still needed (nothing to check, or already known: no)."""
        return self._globs and server_id in self._modules and server_id not in self._names

    def check(self, listed: Mapping[str, Iterable[tuple[str, str]]]) -> list[str]:
        """New warnings, given (protocol name, Python name) of each tool of some servers."""
        if not self._globs:
            return []
        with self._lock:
            for server_id, tools in listed.items():
                if self.wants(server_id):
                    module = self._modules[server_id]
                    self._names[server_id] = {name for tool, export in tools
                                              for name in tool_names(server_id, tool, export, module)}  # fmt: skip
            names = set().union(*self._names.values())
            complete = len(self._names) == len(self._modules)
            found = self._policy.unmatched_globs(names, {*self._modules, *self._modules.values()}, complete=complete)
            fresh = [warning for warning in found if warning not in self._warned]
            self._warned.update(fresh)
            return fresh


def _matches(names: Iterable[str], globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs for name in names)


def _names_no_server(glob: str, prefixes: Collection[str]) -> bool:
    """Whether a glob cannot match a tool of any server in `prefixes`, whatever their tools are."""
    head = _WILDCARD.split(glob, 1)[0]  # the literal start, up to the first wildcard
    if "." not in glob:
        return True  # every name is "server.tool"
    if "." not in head:
        return False  # the server part has a wildcard: only the listings can tell
    return not any(prefix.startswith(head) or head.startswith(prefix + ".") for prefix in prefixes)


def load_policy(path: Path | str) -> Policy:
    """Reads a TOML (``.toml``) or JSON policy file; raises ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the policy: {exc}") from exc
    try:
        if path.suffix == ".toml":
            import tomllib

            document = tomllib.loads(text)
        else:
            document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {exc}") from exc
    return parse_policy(document, str(path))


def parse_policy(document: Any, source: str = "<policy>") -> Policy:
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: a policy is an object (table) of settings")
    unknown = sorted(set(document) - set(Policy.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"{source}: unknown policy settings {unknown}")
    values: dict[str, Any] = {}
    for key in GLOB_SETTINGS:
        if key in document:
            globs = document[key]
            if not isinstance(globs, list) or not all(isinstance(g, str) for g in globs):
                raise ConfigError(f"{source}: {key} must be a list of 'server.tool' globs")
            values[key] = tuple(globs)
    if "approve_destructive" in document:
        if not isinstance(document["approve_destructive"], bool):
            raise ConfigError(f"{source}: approve_destructive must be true or false")
        values["approve_destructive"] = document["approve_destructive"]
    if "rate_limits" in document:
        limits = document["rate_limits"]
        if not isinstance(limits, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in limits.values()
        ):
            raise ConfigError(f"{source}: rate_limits maps server ids to positive calls per second")
        values["rate_limits"] = {str(k): float(v) for k, v in limits.items()}
    if "max_tool_calls" in document:
        cap = document["max_tool_calls"]
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
            raise ConfigError(f"{source}: max_tool_calls must be a non-negative integer")
        values["max_tool_calls"] = cap
    if "pii" in document:
        if document["pii"] not in PII_MODES:
            raise ConfigError(f"{source}: pii must be one of {', '.join(PII_MODES)}")
        values["pii"] = document["pii"]
    return Policy(**values)


class RateLimiter:
    """A token bucket per server, shared by every run: bursts up to one second's worth of calls."""

    def __init__(self, rates: dict[str, float], clock: Any = time.monotonic) -> None:
        self._rates = rates
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # server → (tokens, when)

    def delay(self, server_id: str) -> float:
        """Takes a token; returns how many seconds the call must wait for it (0 when none)."""
        rate = self._rates.get(server_id)
        if not rate:
            return 0.0
        capacity = max(1.0, rate)
        now = self._clock()
        tokens, when = self._buckets.get(server_id, (capacity, now))
        tokens = min(capacity, tokens + (now - when) * rate) - 1.0
        self._buckets[server_id] = (tokens, now)
        return 0.0 if tokens >= 0 else -tokens / rate
