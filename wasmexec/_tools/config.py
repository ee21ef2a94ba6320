"""The `mcpServers` configuration that Claude Desktop, Claude Code and Cursor use.

    {"mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_TOKEN": "…"}},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer …"}}}}

An entry may also say `"timeout": SECONDS` (as Cline's config does): a call to that
server that takes longer is a failure of the server, which counts towards its circuit
breaker (the run's own deadline never does). A malformed file is a `ConfigError`
naming the file; a malformed entry is skipped with a `ConfigProblem` naming the entry,
so one bad entry never disables the others.
`env` and `headers` go to the server, never into the sandbox. The values among them that
are secrets (`wasmexec._redact.is_secret`: a name such as `GITHUB_TOKEN`, `X-Api-Key` or
`Authorization`, a value that looks like a key, or a name listed in the entry's
`"secrets": ["NAME", …]`) also go to the redactor, which replaces them in everything a
run returns; other values (`"TZ": "Europe/Berlin"`) are left alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from wasmexec._exceptions import ConfigError
from wasmexec._redact import is_secret

Transport = Literal["stdio", "http"]

_STDIO_TYPES = {"stdio"}
_HTTP_TYPES = {"http", "streamable-http", "streamable_http", "streamableHttp"}
_KNOWN_KEYS = {
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "disabled",
    "description",
    "timeout",
    "secrets",
}


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server the sandbox can reach."""

    server_id: str
    """The key in `mcpServers`; also the name agent code uses (`servers.<module>`)."""
    transport: Transport
    command: str | None = None
    """stdio: the program to start."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    """stdio: extra environment of the server process (secrets)."""
    cwd: str | None = None
    url: str | None = None
    """http: the streamable HTTP endpoint."""
    headers: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    """http: request headers (secrets)."""
    description: str = ""
    timeout: float | None = None
    """Seconds a call (or a listing) may take before it counts as the server's failure; None: the pool's default."""
    secret_names: tuple[str, ...] = ()
    """Env and header names the entry's `"secrets"` marks as secrets, besides those `is_secret` finds."""

    @property
    def fingerprint(self) -> str:
        """What identifies the server (never the secret values): the schema cache key."""
        from wasmexec._tools.schema_cache import config_fingerprint  # lazy: cachetools is not needed to read a config

        return config_fingerprint(self.command, self.args, self.url, self.env, self.headers, cwd=self.cwd)

    def secrets(self) -> list[str]:
        """Values to redact from everything a run returns: the env and header values that are secrets."""
        named = [*self.env.items(), *self.headers.items()]
        return [value for name, value in named if is_secret(name, value, marked=self.secret_names)]


@dataclass(frozen=True)
class ConfigProblem:
    """A server entry that was skipped, and why."""

    server_id: str
    message: str


@dataclass(frozen=True)
class Config:
    """The servers of one configuration file."""

    servers: dict[str, ServerConfig] = field(default_factory=dict)
    problems: tuple[ConfigProblem, ...] = ()
    source: str = "<empty>"


def load_config(path: Path | str) -> Config:
    """Reads an `mcpServers` JSON file; raises ConfigError when the file itself is unusable."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the MCP server config: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text") from exc
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    return parse_config(document, source=str(path))


def parse_config(document: Any, source: str = "<config>") -> Config:
    """Validates an already decoded `mcpServers` document."""
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise ConfigError(f'{source}: expected an object with an "mcpServers" object, like Claude Desktop\'s config')
    servers: dict[str, ServerConfig] = {}
    problems: list[ConfigProblem] = []
    for server_id, entry in document["mcpServers"].items():
        try:
            server = _parse_entry(server_id, entry)
        except ValueError as exc:
            problems.append(ConfigProblem(server_id, f"{source}: server {server_id!r}: {exc}"))
            continue
        if server is not None:
            servers[server_id] = server
    return Config(servers, tuple(problems), source)


def _parse_entry(server_id: str, entry: Any) -> ServerConfig | None:
    if not server_id.strip():
        raise ValueError("the server id is empty")
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, got {type(entry).__name__}")
    if entry.get("disabled") is True:
        return None
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown keys {unknown}; expected command/args/env/cwd or url/headers")
    kind = entry.get("type")
    if kind == "sse":
        raise ValueError('the legacy SSE transport is not supported; use streamable HTTP ("url")')
    if kind in _HTTP_TYPES or (kind is None and "url" in entry):
        return _parse_http(server_id, entry)
    if kind in _STDIO_TYPES or (kind is None and "command" in entry):
        return _parse_stdio(server_id, entry)
    raise ValueError('needs "command" (a stdio server) or "url" (a streamable HTTP server)')


def _parse_stdio(server_id: str, entry: dict[str, Any]) -> ServerConfig:
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        raise ValueError('"command" must be a non-empty string')
    if "url" in entry:
        raise ValueError('has both "command" and "url"; choose one transport')
    return ServerConfig(
        server_id, "stdio", command=command, args=tuple(_strings(entry, "args")), env=_string_map(entry, "env"),
        cwd=_optional_string(entry, "cwd"), description=_optional_string(entry, "description") or "",
        timeout=_timeout(entry), secret_names=tuple(_strings(entry, "secrets")),
    )  # fmt: skip


def _parse_http(server_id: str, entry: dict[str, Any]) -> ServerConfig:
    url = entry.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError('"url" must be an http:// or https:// URL')
    if "command" in entry:
        raise ValueError('has both "command" and "url"; choose one transport')
    return ServerConfig(
        server_id, "http", url=url, headers=_string_map(entry, "headers"),
        description=_optional_string(entry, "description") or "", timeout=_timeout(entry),
        secret_names=tuple(_strings(entry, "secrets")),
    )  # fmt: skip


def _strings(entry: dict[str, Any], key: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'"{key}" must be a list of strings')
    return value


def _string_map(entry: dict[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f'"{key}" must be an object of strings')
    return dict(value)


def _optional_string(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f'"{key}" must be a string')
    return value


def _timeout(entry: dict[str, Any]) -> float | None:
    value = entry.get("timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError('"timeout" must be a positive number of seconds')
    return float(value)
