"""Which tool calls a run may make: allow and deny globs, approvals, rate limits.

A policy file is TOML or JSON::

    allow = ["github.*", "time.*"]          # globs over "server.tool"; default: everything
    deny = ["github.delete_*"]              # deny wins over allow
    require_approval = ["filesystem.*"]     # besides every tool annotated destructiveHint
    approve_destructive = true              # ask before destructiveHint tools (default true)
    max_tool_calls = 50                     # per run
    [rate_limits]                           # calls per second, per server
    github = 5

Globs match the server id and the tool's protocol name (`fnmatch`, case-sensitive).
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from wasmexec._exceptions import ConfigError

Decision = Literal["allow", "deny", "approve"]


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
    """Globs approved in advance (the CLI's ``--approve``)."""
    rate_limits: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    """Server id → calls per second."""
    max_tool_calls: int | None = None
    """A per-run cap on top of the run's limits."""

    def decide(self, server_id: str, tool_name: str, annotations: dict[str, Any] | None) -> Decision:
        """allow, deny, or approve (ask the user first)."""
        name = f"{server_id}.{tool_name}"
        if _matches(name, self.deny) or not _matches(name, self.allow):
            return "deny"
        destructive = bool((annotations or {}).get("destructiveHint")) and self.approve_destructive
        if (destructive or _matches(name, self.require_approval)) and not _matches(name, self.pre_approved):
            return "approve"
        return "allow"


def _matches(name: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


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
    unknown = sorted(set(document) - {f for f in Policy.__dataclass_fields__ if f != "pre_approved"})
    if unknown:
        raise ConfigError(f"{source}: unknown policy settings {unknown}")
    values: dict[str, Any] = {}
    for key in ("allow", "deny", "require_approval"):
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
