"""Finds the MCP server configs other clients keep, and merges them into one wasmexec config.

Where each client keeps its servers (Linux, macOS and Windows; each client's documentation):

| client | project | user |
| --- | --- | --- |
| claude-code | ``./.mcp.json`` | ``~/.claude.json``: ``mcpServers`` (user scope), ``projects[<cwd>]`` (local) |
| cursor | ``./.cursor/mcp.json`` | ``~/.cursor/mcp.json`` |
| vscode | ``./.vscode/mcp.json`` | ``<Code>/User/mcp.json`` |
| windsurf | | ``~/.codeium/windsurf/mcp_config.json`` |
| cline | | ``<Code>/User/globalStorage/saoudrizwan.claude-dev/settings/cline_mcp_settings.json`` |
| roo | ``./.roo/mcp.json`` | ``<Code>/User/globalStorage/rooveterinaryinc.roo-cline/settings/mcp_settings.json`` |
| claude-desktop | | ``<config>/Claude/claude_desktop_config.json`` |

``<Code>`` is ``$XDG_CONFIG_HOME/Code`` (default ``~/.config/Code``) on Linux, ``~/Library/Application
Support/Code`` on macOS and ``%APPDATA%\\Code`` on Windows; ``<config>`` is the same without ``Code``
(Claude Desktop has no official Linux build; its community builds use ``~/.config/Claude``).

Merging: clients are read in the order above, and within one client the more specific scope
first (Claude Code's own precedence: local, then project, then user). The first entry of a
name wins; a later entry of the same name that differs is left out with a note saying where
it came from (``--from`` picks the clients). Entries are rewritten into the portable form:
Windsurf's ``serverUrl`` → ``url``, Cline's ``transportType`` → ``type``, ``${env:VAR}`` →
``${VAR}``, VS Code's ``${input:id}`` → ``${ID}`` (set it in the environment; a password
input also marks its env or header as a secret), ``${workspaceFolder}`` and a relative
``envFile`` → absolute paths, and keys with no meaning here are dropped with a note.
Secrets written as ``${VAR}`` stay references: nothing is expanded into the written file.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasmexec._exceptions import ConfigError
from wasmexec._tools.config import (
    KNOWN_KEYS,
    Config,
    ConfigProblem,
    ServerConfig,
    parse_config,
    read_json_file,
    server_entries,
    workspace_of,
)
from wasmexec._tools.expand import portable

#: Every client `config import --from` knows, in the order their entries win.
CLIENTS = ("claude-code", "cursor", "vscode", "windsurf", "cline", "roo", "claude-desktop")
_STRING_FIELDS = ("command", "url", "serverUrl", "cwd", "envFile")
_LIST_FIELDS = ("args",)
_MAP_FIELDS = ("env", "headers")


@dataclass(frozen=True)
class Place:
    """Where the user's files are: the home and project directories, the platform, the environment."""

    home: Path
    cwd: Path
    platform: str = sys.platform
    environ: Mapping[str, str] = field(default_factory=dict)

    def config_dir(self) -> Path:
        """The per-user application config directory of VS Code and Claude Desktop."""
        if self.platform == "darwin":
            return self.home / "Library" / "Application Support"
        if self.platform == "win32":
            return Path(self.environ.get("APPDATA") or self.home / "AppData" / "Roaming")
        return Path(self.environ.get("XDG_CONFIG_HOME") or self.home / ".config")


def client_paths(client: str, place: Place) -> list[Path]:
    """The files `client` may keep servers in, most specific first (see the module docstring)."""
    code_user = place.config_dir() / "Code" / "User"
    storage = code_user / "globalStorage"
    paths = {
        "claude-code": [place.cwd / ".mcp.json", place.home / ".claude.json"],
        "cursor": [place.cwd / ".cursor" / "mcp.json", place.home / ".cursor" / "mcp.json"],
        "vscode": [place.cwd / ".vscode" / "mcp.json", code_user / "mcp.json"],
        "windsurf": [place.home / ".codeium" / "windsurf" / "mcp_config.json"],
        "cline": [storage / "saoudrizwan.claude-dev" / "settings" / "cline_mcp_settings.json"],
        "roo": [place.cwd / ".roo" / "mcp.json",
                storage / "rooveterinaryinc.roo-cline" / "settings" / "mcp_settings.json"],
        "claude-desktop": [place.config_dir() / "Claude" / "claude_desktop_config.json"],
    }  # fmt: skip
    return paths[client]


@dataclass
class Merged:
    """Entries merged from several files, in the portable form, with where each came from and what was dropped."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)
    """The files read, as "client: path"."""
    notes: list[str] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {"mcpServers": self.entries}


def gather(sources: list[str], place: Place) -> Merged:
    """Reads the configs of `sources` (client names or file paths) and merges them; see the module docstring."""
    merged = Merged()
    for source in sources:
        if source in CLIENTS:
            for path in client_paths(source, place):
                if path.is_file():
                    _read_into(merged, source, path, place)
        else:
            path = Path(source).expanduser()
            if not path.is_file():
                raise ConfigError(f"{source}: no such file (and not one of the clients {', '.join(CLIENTS)})")
            _read_into(merged, "file", path, place)
    return merged


def auto_config(place: Place, environ: Mapping[str, str] | None = None) -> Config:
    """The config `--config auto` reads: every client's servers, merged, read in place (not written).

    Each entry's problems and notes name the file it came from.
    """
    merged = gather(list(CLIENTS), place)
    by_origin: dict[str, dict[str, Any]] = {}
    for name, entry in merged.entries.items():
        by_origin.setdefault(merged.origins[name], {})[name] = entry
    servers: dict[str, ServerConfig] = {}
    problems: list[ConfigProblem] = []
    notes = [ConfigProblem("", note) for note in merged.notes]
    for origin, entries in by_origin.items():
        part = parse_config({"mcpServers": entries}, source=origin, environ=environ, workspace=place.cwd)
        servers.update(part.servers)
        problems += part.problems
        notes += part.notes
    if not merged.read:
        notes.append(ConfigProblem("", "--config auto: no client config found in the standard places "
                                   "(`wasmexec config import --help` lists them)"))  # fmt: skip
    source = "auto: " + ("; ".join(merged.read) or "no client config found")
    return Config(servers, tuple(problems), source, tuple(notes))


def _read_into(merged: Merged, client: str, path: Path, place: Place) -> None:
    document = read_json_file(path, f"{client} config")
    workspace = workspace_of(path)
    scopes: list[tuple[str, Any]] = []
    if path.name == ".claude.json" and isinstance(document, dict):
        project = (
            (document.get("projects") or {}).get(str(place.cwd)) if isinstance(document.get("projects"), dict) else None
        )
        if isinstance(project, dict) and isinstance(project.get("mcpServers"), dict):
            scopes.append((f"{path} (local scope of {place.cwd})", project))
            workspace = place.cwd
        if isinstance(document.get("mcpServers"), dict):
            scopes.append((str(path), document))
    else:
        scopes.append((str(path), document))
    for where, scope in scopes:
        try:
            entries = server_entries(scope, where)
        except ConfigError:
            merged.notes.append(f"{client}: {where} has no servers; skipped")
            continue
        merged.read.append(f"{client}: {where}")
        secret_inputs = _password_inputs(scope)
        for name, entry in entries.items():
            _merge(merged, name, entry, f"{client} ({where})", workspace, secret_inputs)


def _merge(merged: Merged, name: str, entry: Any, origin: str, workspace: Path, secret_inputs: set[str]) -> None:
    if not isinstance(entry, dict):
        merged.notes.append(f"{origin}: server {name!r} is not an object; skipped")
        return
    if _is_wasmexec(entry):
        merged.notes.append(f"{origin}: server {name!r} is wasmexec itself; left out (its sandbox would start "
                            "another wasmexec over the same configs)")  # fmt: skip
        return
    dropped = sorted(set(entry) - KNOWN_KEYS)
    portable_entry = _portable(entry, workspace, secret_inputs)
    if name in merged.entries:
        if merged.entries[name] != portable_entry:
            merged.notes.append(f"{origin}: server {name!r} left out: {merged.origins[name]} defines it too, "
                                "and that one wins (pick clients with --from)")  # fmt: skip
        return
    if dropped:
        merged.notes.append(f"{origin}: server {name!r}: dropped keys {dropped} (no meaning in wasmexec)")
    merged.entries[name] = portable_entry
    merged.origins[name] = origin


def _is_wasmexec(entry: dict[str, Any]) -> bool:
    """Whether the entry starts `wasmexec serve` (directly, as ``python -m wasmexec``, or through uvx/pipx)."""
    command, args = entry.get("command"), entry.get("args")
    words = [Path(command).name if isinstance(command, str) else ""]
    words += [str(arg) for arg in args] if isinstance(args, list) else []
    named = any(word.split("==")[0].split("[")[0] in ("wasmexec", "wasmexec.exe") for word in words)
    return named and "serve" in words


def _portable(entry: dict[str, Any], workspace: Path, secret_inputs: set[str]) -> dict[str, Any]:
    """The entry with only known keys, in the spelling wasmexec writes (see the module docstring)."""

    def rewrite(value: Any) -> Any:
        return portable(value.replace("${workspaceFolder}", str(workspace))) if isinstance(value, str) else value

    result: dict[str, Any] = {}
    for key, value in entry.items():
        if key not in KNOWN_KEYS:
            continue
        if key in _STRING_FIELDS:
            value = rewrite(value)
        elif key in _LIST_FIELDS and isinstance(value, list):
            value = [rewrite(item) for item in value]
        elif key in _MAP_FIELDS and isinstance(value, dict):
            value = {name: rewrite(item) for name, item in value.items()}
        result[{"serverUrl": "url", "transportType": "type"}.get(key, key)] = value
    if isinstance(result.get("envFile"), str) and not Path(result["envFile"]).is_absolute():
        result["envFile"] = str(workspace / result["envFile"])
    marked = [name for field_name in _MAP_FIELDS for name, value in _map(entry, field_name).items()
              if any(f"${{input:{input_id}}}" in value for input_id in secret_inputs)]  # fmt: skip
    if marked:
        result["secrets"] = [
            *(result.get("secrets") or []),
            *(name for name in marked if name not in (result.get("secrets") or [])),
        ]
    return result


def _map(entry: dict[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key)
    return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


def _password_inputs(document: Any) -> set[str]:
    inputs = document.get("inputs") if isinstance(document, dict) else None
    return (
        {str(i.get("id")) for i in inputs if isinstance(i, dict) and i.get("password")}
        if isinstance(inputs, list)
        else set()
    )


def write_config(merged: Merged, output: Path, *, force: bool) -> None:
    """Writes the merged config to `output` with mode 0600 (it may hold secrets); never overwrites without `force`."""
    text = json.dumps(merged.document(), indent=2, ensure_ascii=False) + "\n"
    target = output.with_name(f".{output.name}.{os.getpid()}.tmp") if force else output
    try:
        output.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # ~/.config/wasmexec on a new machine
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never through a planted file
    except FileExistsError:
        raise ConfigError(f"{output} exists; pass --force to overwrite it, or --output FILE") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        if force:
            os.replace(target, output)  # atomic: a reader never sees half a config
    except OSError as exc:
        target.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {output}: {exc.strerror or exc}") from exc
