"""`${VAR}` expansion in MCP server entries, as Claude Code does it, plus the other clients' spellings.

Claude Code expands ``${VAR}`` and ``${VAR:-default}`` in ``command``, ``args``, ``env``,
``url`` and ``headers`` of ``.mcp.json``; a variable that is not set and has no default
makes that config fail to parse (https://code.claude.com/docs/en/mcp, "Environment
variable expansion in .mcp.json"). Here such an entry is skipped with a problem that
names the server and the variable, so one missing variable never disables the others.

The spellings of Cursor, VS Code and Windsurf are read too: ``${env:VAR}`` (the same as
``${VAR}``), ``${userHome}``, ``${workspaceFolder}`` (the folder holding the client's
project directory, else the current directory) and VS Code's ``${input:id}``, which VS
Code asks the user for: here it is read from the environment variable named after the id
(``github-token`` → ``GITHUB_TOKEN``). A bare ``$VAR`` is left alone, as Claude Code does;
so is any other ``${…}`` form. Defaults are literal text (``${A:-${B}}`` is not nested).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from wasmexec._redact import is_secret

#: ${NAME}, ${NAME:-default}, ${env:NAME}, ${input:id}, ${userHome}, ${workspaceFolder}.
_REFERENCE = re.compile(r"\$\{(?:(env:|input:)?([A-Za-z_][A-Za-z0-9_.-]*))(?::-([^}]*))?\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class MissingVariable(ValueError):
    """A ``${VAR}`` without a default whose variable is not set."""

    def __init__(self, name: str, reference: str) -> None:
        super().__init__(f"{reference} is not set (set {name} in the environment, or write ${{{name}:-default}})")
        self.name = name


def input_variable(input_id: str) -> str:
    """The environment variable that stands in for VS Code's ``${input:id}``: ``github-token`` → ``GITHUB_TOKEN``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", input_id).strip("_").upper()


@dataclass
class Expander:
    """Expands references in the strings of one server entry and remembers which values were secrets."""

    environ: Mapping[str, str]
    home: str = ""
    workspace: str = ""
    secret_inputs: frozenset[str] = frozenset()
    """Ids of VS Code inputs marked ``"password": true``."""
    secrets: list[str] = field(default_factory=list)
    """Values substituted from variables whose name or value is a secret (`is_secret`), to be redacted."""

    def expand(self, text: str) -> str:
        """`text` with every reference replaced; raises MissingVariable for an unset one without a default."""
        return _REFERENCE.sub(self._replace, text)

    def _replace(self, found: re.Match[str]) -> str:
        prefix, name, default = found.group(1), found.group(2), found.group(3)
        if prefix is None and default is None and name in ("userHome", "workspaceFolder"):
            return self.home if name == "userHome" else self.workspace
        variable = input_variable(name) if prefix == "input:" else name
        if not _IDENTIFIER.match(variable):
            return found.group(0)  # not a variable reference (e.g. VS Code's ${command:…}): leave it
        value = self.environ.get(variable)
        if value is None:
            if default is None:
                raise MissingVariable(variable, found.group(0))
            return default
        if is_secret(variable, value) or (prefix == "input:" and name in self.secret_inputs):
            self.secrets.append(value)
        return value


def portable(text: str) -> str:
    """`text` with the other clients' spellings rewritten as ``${VAR}``, for a config wasmexec writes.

    ``${env:VAR}`` → ``${VAR}`` and ``${input:id}`` → ``${ID}``; other references are kept.
    """

    def rewrite(found: re.Match[str]) -> str:
        prefix, name, default = found.group(1), found.group(2), found.group(3)
        if prefix is None:
            return found.group(0)
        variable = input_variable(name) if prefix == "input:" else name
        return f"${{{variable}}}" if default is None else f"${{{variable}:-{default}}}"

    return _REFERENCE.sub(rewrite, text)
