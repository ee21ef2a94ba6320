"""The `mcpServers` configuration that Claude Desktop, Claude Code and Cursor use, and the others' dialects.

    {"mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer …"}}}}

A malformed file is a `ConfigError` naming the file; a malformed entry is skipped with a
`ConfigProblem` naming the entry, so one bad entry never disables the others. Keys that
other clients write and wasmexec has no use for are ignored with a note (`Config.notes`),
never an error. What the other clients' keys mean here:

- ``"servers"`` (VS Code's top-level key) is read like ``"mcpServers"``; VS Code's
  ``"inputs"`` name the ``${input:id}`` values (read from the environment, see `expand`).
- ``"type"``: ``"stdio"``; ``"http"``, ``"streamable-http"`` or ``"streamableHttp"`` (streamable
  HTTP); ``"sse"`` (the legacy HTTP+SSE transport of 2024-11-05, still what many hosted servers
  and Claude Code's older entries use). Without a type, ``"url"`` means streamable HTTP.
  Cline's older ``"transportType"`` is read the same way. Windsurf's ``"serverUrl"`` is ``"url"``.
- ``"timeout"``: seconds (Cline's and Roo Code's unit too): a call to that server that takes
  longer is a failure of the server, which counts towards its circuit breaker (the run's own
  deadline never does).
- ``"autoApprove"`` (Cline) and ``"alwaysAllow"`` (Roo Code): tool names approved in advance,
  like the policy's ``pre_approved`` (`ServerConfig.policy_globs`); ``"disabledTools"`` (Roo
  Code): tools denied. ``"disabled": true`` skips the server with a note.
- ``"envFile"`` (VS Code): a ``KEY=VALUE`` file whose variables the server gets (``"env"`` wins).
- ``${VAR}`` and ``${VAR:-default}`` expand in ``command``, ``args``, ``env``, ``url`` and
  ``headers`` on the host when the config is read (`wasmexec._tools.expand`).

`env` and `headers` go to the server, never into the sandbox. The values among them that
are secrets (`wasmexec._redact.is_secret`: a name such as `GITHUB_TOKEN`, `X-Api-Key` or
`Authorization`, a value that looks like a key, or a name listed in the entry's
`"secrets": ["NAME", …]`) also go to the redactor, which replaces them in everything a
run returns, as do values expanded from a variable that is a secret (wherever they land,
an argument or a URL included); other values (`"TZ": "Europe/Berlin"`) are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from wasmexec._exceptions import ConfigError
from wasmexec._redact import is_secret
from wasmexec._tools.expand import Expander
from wasmexec._tools.jsonc import loads_jsonc

if TYPE_CHECKING:
    from wasmexec._tools.policy import Policy

#: The settings an `"oauth"` object may hold (`wasmexec._tools.oauth` acts on them).
OAUTH_SETTINGS = {"enabled": bool, "client_id": str, "client_secret": str, "scope": str, "redirect_port": int,
                  "client_name": str}  # fmt: skip

Transport = Literal["stdio", "http", "sse"]

_STDIO_TYPES = {"stdio"}
_HTTP_TYPES = {"http", "streamable-http", "streamable_http", "streamableHttp"}
#: Keys with a meaning here (see the module docstring); any other key is ignored with a note.
KNOWN_KEYS = frozenset({
    "type", "transportType", "command", "args", "env", "envFile", "cwd", "url", "serverUrl", "headers", "disabled",
    "description", "timeout", "secrets", "autoApprove", "alwaysAllow", "disabledTools", "oauth",
})  # fmt: skip
#: Config files are read whole: Claude Code's ~/.claude.json holds more than servers, but never this much.
MAX_CONFIG_BYTES = 64 * 1024 * 1024
#: The top-level keys that hold the servers: everyone's, and VS Code's.
SERVER_KEYS = ("mcpServers", "servers")
#: Folders of a project that clients keep their config in: ${workspaceFolder} is the folder above.
_PROJECT_DIRS = {".vscode", ".cursor", ".roo", ".windsurf"}


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
    """http: the streamable HTTP endpoint; sse: the legacy transport's event stream URL."""
    headers: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    """http: request headers (secrets)."""
    description: str = ""
    timeout: float | None = None
    """Seconds a call (or a listing) may take before it counts as the server's failure; None: the pool's default."""
    secret_names: tuple[str, ...] = ()
    """Env and header names the entry's `"secrets"` marks as secrets, besides those `is_secret` finds."""
    auto_approve: tuple[str, ...] = ()
    """Tools approved in advance (Cline's `autoApprove`, Roo Code's `alwaysAllow`), by protocol name."""
    disabled_tools: tuple[str, ...] = ()
    """Tools never allowed (Roo Code's `disabledTools`), by protocol name."""
    oauth: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    """http: the entry's `"oauth"` settings (`wasmexec._tools.oauth`); None: OAuth when the server asks for it."""
    expanded_secrets: tuple[str, ...] = field(default=(), hash=False, compare=False, repr=False)
    """Values `${VAR}` expansion took from variables that are secrets, wherever they landed."""

    @property
    def fingerprint(self) -> str:
        """What identifies the server (never the secret values): the schema cache key."""
        from wasmexec._tools.schema_cache import config_fingerprint  # lazy: cachetools is not needed to read a config

        return config_fingerprint(self.command, self.args, self.url, self.env, self.headers, cwd=self.cwd)

    def secrets(self) -> list[str]:
        """Values to redact from everything a run returns: env and header values that are secrets, and
        values expanded from secret variables."""
        named = [*self.env.items(), *self.headers.items()]
        found = [value for name, value in named if is_secret(name, value, marked=self.secret_names)]
        return found + [value for value in self.expanded_secrets if value not in found]

    def policy_globs(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(pre-approved, denied) ``server.tool`` globs from `auto_approve` and `disabled_tools`."""
        approved = tuple(self._exact_glob(tool) for tool in self.auto_approve)
        return approved, tuple(self._exact_glob(tool) for tool in self.disabled_tools)

    def _exact_glob(self, tool: str) -> str:
        """A glob that matches exactly this server's `tool` (fnmatch's special characters escaped)."""
        return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in f"{self.server_id}.{tool}")


@dataclass(frozen=True)
class ConfigProblem:
    """A server entry that was skipped, or a part of one that was ignored, and why."""

    server_id: str
    message: str


@dataclass(frozen=True)
class Config:
    """The servers of one configuration file."""

    servers: dict[str, ServerConfig] = field(default_factory=dict)
    problems: tuple[ConfigProblem, ...] = ()
    """Entries that were skipped because they are wrong (a warning each)."""
    source: str = "<empty>"
    notes: tuple[ConfigProblem, ...] = ()
    """What was ignored on purpose: disabled servers, keys meant for other clients (a note each)."""


def with_server_policy(policy: Policy, config: Config) -> Policy:
    """`policy` plus what the server entries say: their `autoApprove`/`alwaysAllow` tools pre-approved,
    their `disabledTools` denied (deny wins over everything, as in the policy file)."""
    from dataclasses import replace

    approved = [glob for server in config.servers.values() for glob in server.policy_globs()[0]]
    denied = [glob for server in config.servers.values() for glob in server.policy_globs()[1]]
    if not approved and not denied:
        return policy
    return replace(policy, pre_approved=(*policy.pre_approved, *approved), deny=(*policy.deny, *denied))


def load_config(path: Path | str, environ: Mapping[str, str] | None = None) -> Config:
    """Reads an `mcpServers` JSON file (comments and trailing commas allowed, as VS Code writes them).

    Raises ConfigError when the file itself is unusable. `environ` holds the variables that
    ``${VAR}`` references expand to (default: this process's environment).
    """
    path = Path(path)
    document = read_json_file(path, "MCP server config")
    return parse_config(document, source=str(path), environ=environ, workspace=workspace_of(path))


def read_json_file(path: Path, what: str) -> Any:
    """A JSON (or JSONC) file's value; ConfigError naming the file when it cannot be read or parsed."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: the {what} is larger than {MAX_CONFIG_BYTES} bytes; not read")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text") from exc
    try:
        return loads_jsonc(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc


def workspace_of(path: Path) -> Path:
    """What ``${workspaceFolder}`` means for a config file: the project folder it belongs to."""
    folder = path.absolute().parent
    return folder.parent if folder.name in _PROJECT_DIRS else folder


def server_entries(document: Any, source: str) -> dict[str, Any]:
    """The server entries of a config document (`mcpServers`, or VS Code's `servers`)."""
    if isinstance(document, dict):
        for key in SERVER_KEYS:
            if isinstance(document.get(key), dict):
                return dict(document[key])
    raise ConfigError(f'{source}: expected an object with an "mcpServers" object, like Claude Desktop\'s config '
                      '(or VS Code\'s "servers")')  # fmt: skip


def parse_config(
    document: Any,
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
    workspace: Path | None = None,
) -> Config:
    """Validates an already decoded `mcpServers` document, expanding ``${VAR}`` from `environ` (default: os.environ).

    `workspace` is what ``${workspaceFolder}`` and a relative ``envFile`` refer to (default: the current directory).
    """
    entries = server_entries(document, source)
    secret_inputs = _secret_inputs(document)
    base = workspace or Path.cwd()
    servers: dict[str, ServerConfig] = {}
    problems: list[ConfigProblem] = []
    notes: list[ConfigProblem] = []
    for server_id, entry in entries.items():
        expander = Expander(os.environ if environ is None else environ, home=str(Path.home()),
                            workspace=str(base), secret_inputs=secret_inputs)  # fmt: skip
        where = f"{source}: server {server_id!r}"
        noted: list[str] = []
        try:
            server = _parse_entry(server_id, entry, expander, base, noted.append)
        except ValueError as exc:
            problems.append(ConfigProblem(server_id, f"{where}: {exc}"))
            continue
        finally:
            notes.extend(ConfigProblem(server_id, f"{where}: {text}") for text in noted)
        if server is not None:
            servers[server_id] = server
    return Config(servers, tuple(problems), source, tuple(notes))


def _secret_inputs(document: Any) -> frozenset[str]:
    inputs = document.get("inputs") if isinstance(document, dict) else None
    if not isinstance(inputs, list):
        return frozenset()
    return frozenset(str(item.get("id")) for item in inputs if isinstance(item, dict) and item.get("password"))


def _parse_entry(
    server_id: str, entry: Any, expander: Expander, base: Path, note: Callable[[str], None]
) -> ServerConfig | None:
    if not server_id.strip():
        raise ValueError("the server id is empty")
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, got {type(entry).__name__}")
    if entry.get("disabled") is True:
        note('disabled ("disabled": true); skipped')
        return None
    unknown = sorted(set(entry) - KNOWN_KEYS)
    if unknown:
        note(f"ignored keys {unknown} (they have no meaning in wasmexec)")
    kind = entry.get("type", entry.get("transportType"))
    url = entry.get("url", entry.get("serverUrl"))
    if kind in _HTTP_TYPES or kind == "sse" or (kind is None and url is not None):
        server = _parse_http(server_id, entry, url, expander, "sse" if kind == "sse" else "http")
    elif kind in _STDIO_TYPES or (kind is None and "command" in entry):
        server = _parse_stdio(server_id, entry, expander, base)
    elif kind is not None:
        raise ValueError(f'unknown "type" {kind!r}; expected "stdio", "http", "streamable-http" or "sse"')
    else:
        raise ValueError('needs "command" (a stdio server) or "url" (a streamable HTTP server)')
    return server


def _common(entry: dict[str, Any]) -> dict[str, Any]:
    approve = _strings(entry, "autoApprove") + [t for t in _strings(entry, "alwaysAllow")
                                                if t not in entry.get("autoApprove", [])]  # fmt: skip
    return {
        "description": _optional_string(entry, "description") or "",
        "timeout": _timeout(entry),
        "secret_names": tuple(_strings(entry, "secrets")),
        "auto_approve": tuple(approve),
        "disabled_tools": tuple(_strings(entry, "disabledTools")),
    }


def _parse_stdio(server_id: str, entry: dict[str, Any], expander: Expander, base: Path) -> ServerConfig:
    command = entry.get("command")
    if not isinstance(command, str) or not command:
        raise ValueError('"command" must be a non-empty string')
    if "url" in entry or "serverUrl" in entry:
        raise ValueError('has both "command" and "url"; choose one transport')
    env = {**_env_file(entry, expander, base), **_expanded_map(entry, "env", expander)}
    return ServerConfig(
        server_id, "stdio", command=expander.expand(command),
        args=tuple(expander.expand(arg) for arg in _strings(entry, "args")), env=env,
        cwd=_optional_string(entry, "cwd"), expanded_secrets=tuple(expander.secrets), **_common(entry),
    )  # fmt: skip


def _parse_http(
    server_id: str, entry: dict[str, Any], url: Any, expander: Expander, transport: Transport
) -> ServerConfig:
    if not isinstance(url, str):
        raise ValueError('"url" must be an http:// or https:// URL')
    url = expander.expand(url)
    if not url.startswith(("http://", "https://")):
        raise ValueError('"url" must be an http:// or https:// URL')
    if "command" in entry:
        raise ValueError('has both "command" and "url"; choose one transport')
    oauth = check_oauth_settings(entry.get("oauth"))
    if oauth is not None:
        oauth = {key: expander.expand(value) if isinstance(value, str) else value for key, value in oauth.items()}
        if oauth.get("client_secret"):
            expander.secrets.append(oauth["client_secret"])
    return ServerConfig(
        server_id, transport, url=url, headers=_expanded_map(entry, "headers", expander), oauth=oauth,
        expanded_secrets=tuple(expander.secrets), **_common(entry),
    )  # fmt: skip


def check_oauth_settings(value: Any) -> dict[str, Any] | None:
    """The `"oauth"` value of an entry, checked: None (unset), or a dict of `OAUTH_SETTINGS`; ValueError if wrong."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"enabled": value}
    if not isinstance(value, dict):
        raise ValueError('"oauth" must be true, false or an object of OAuth settings')
    for key, item in value.items():
        kind = OAUTH_SETTINGS.get(key)
        if kind is None:
            raise ValueError(f'"oauth" has an unknown setting {key!r}; known: {", ".join(OAUTH_SETTINGS)}')
        bad_port = kind is int and (isinstance(item, bool) or not isinstance(item, int) or not 0 < item < 65536)
        if not isinstance(item, kind) or bad_port:
            raise ValueError(f'"oauth" setting {key!r} must be {"a port number" if kind is int else kind.__name__}')
    return dict(value)


def _env_file(entry: dict[str, Any], expander: Expander, base: Path) -> dict[str, str]:
    """The variables of VS Code's `envFile` (``KEY=VALUE`` lines; ``#`` comments; optional quotes)."""
    name = _optional_string(entry, "envFile")
    if name is None:
        return {}
    path = base / expander.expand(name)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f'cannot read its "envFile" {str(path)!r}: {getattr(exc, "strerror", None) or exc}') from exc
    values: dict[str, str] = {}
    for line in lines:
        line = line.strip().removeprefix("export ").strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value
        if is_secret(key, value):
            expander.secrets.append(value)
    return values


def _expanded_map(entry: dict[str, Any], key: str, expander: Expander) -> dict[str, str]:
    return {name: expander.expand(value) for name, value in _string_map(entry, key).items()}


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
