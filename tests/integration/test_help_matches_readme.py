"""The CLI reference's synopsis (docs/cli.md, `## Synopsis`) and the real argparse parsers say the same thing.

Every command in the synopsis exists, every option it shows exists with the same metavar, every
real option is shown, options that exclude each other are shown as `[A | B]` and are exclusive in
the parser. `--help` of every command states the defaults and maxima from `wasmexec._limits`.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from wasmexec import _limits
from wasmexec._cli.main import build_parser

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)(?: ([A-Z]+)\b)?")
BRACKETED_CHOICE = re.compile(r"\[([^\[\]|]+(?:\|[^\[\]|]+)+)\]")


def _synopsis() -> dict[str, str]:
    """Command path ("run", "tools list", "" for bare `wasmexec`) -> its synopsis text, option blocks expanded."""
    section = CLI_DOC.read_text().split("\n## Synopsis\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 2)[1]
    entries: list[str] = []
    for line in block.splitlines():
        if line.strip() and line[0].isspace():
            entries[-1] += " " + line.strip()
        elif line.strip():
            entries.append(line.strip())
    blocks = {m.group(1): m.group(2) for e in entries if (m := re.fullmatch(r"([A-Z]+ OPTIONS):\s*(.*)", e))}
    commands: dict[str, str] = {}
    for entry in entries:
        if not entry.startswith("wasmexec"):
            continue
        for name, text in blocks.items():
            entry = entry.replace(f"[{name}]", text)
        words = entry.split()[1:]
        path = [word for word in words[:2] if re.fullmatch(r"[a-z]+", word)]
        commands[" ".join(path)] = " ".join(words[len(path) :])
    return commands


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Command path -> the parser that parses it (leaves only, plus "" for the top level)."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(path: list[str], parser: argparse.ArgumentParser) -> None:
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not path or not subcommands:
            found[" ".join(path)] = parser
        for action in subcommands:
            for name, child in action.choices.items():
                walk([*path, name], child)

    walk([], build_parser())
    return found


def _real_options(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    """Option -> metavar (None for a flag), without -h/--help and the subcommand selector."""
    options: dict[str, str | None] = {}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or not action.option_strings:
            continue
        metavar = None if action.nargs == 0 else str(action.metavar or action.dest.upper())
        for option in action.option_strings:
            options[option] = metavar
    return options


def _positionals(parser: argparse.ArgumentParser) -> list[str]:
    return [str(a.metavar or a.dest.upper()) for a in parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]  # fmt: skip


def _render(action: argparse.Action) -> str:
    if not action.option_strings:
        return str(action.metavar or action.dest.upper())
    option = max(action.option_strings, key=len)
    return option if action.nargs == 0 else f"{option} {action.metavar or action.dest.upper()}"


SYNOPSIS, PARSERS = _synopsis(), _parsers()


def test_the_synopsis_lists_every_command_and_no_other() -> None:
    assert set(SYNOPSIS) == set(PARSERS)


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_documented_option_exists_with_its_metavar_and_every_real_option_is_documented(command: str) -> None:
    documented = {option: metavar for option, metavar in OPTION.findall(SYNOPSIS[command])}
    real = _real_options(PARSERS[command])
    assert {option: metavar or None for option, metavar in documented.items()} == real


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_positional_argument_is_documented(command: str) -> None:
    text = OPTION.sub("", SYNOPSIS[command])
    assert re.findall(r"\b[A-Z]{2,}\b", text) == _positionals(PARSERS[command])


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_options_that_exclude_each_other_are_shown_as_a_choice_and_only_those(command: str) -> None:
    parser = PARSERS[command]
    groups = [" | ".join(_render(action) for action in group._group_actions)
              for group in parser._mutually_exclusive_groups]  # fmt: skip
    for group in groups:
        assert group in SYNOPSIS[command], group
    for choice in BRACKETED_CHOICE.findall(SYNOPSIS[command]):
        assert " | ".join(part.strip() for part in choice.split("|")) in groups, choice


@pytest.mark.parametrize("command", ["run", "serve"])
def test_help_states_every_limits_default_and_maximum(command: str) -> None:
    text = " ".join(PARSERS[command].format_help().split())
    for name in ("DEFAULT_TIMEOUT_MS", "MAX_TIMEOUT_MS", "DEFAULT_MEMORY_MB", "MAX_MEMORY_MB",
                 "DEFAULT_MAX_STDOUT_BYTES", "DEFAULT_MAX_STDERR_BYTES", "DEFAULT_MAX_RESULT_BYTES",
                 "DEFAULT_MAX_TOOL_CALLS", "DEFAULT_WORKSPACE_MB", "MAX_WORKSPACE_MB", "DEFAULT_WORKSPACE_FILES",
                 "MAX_WORKSPACE_FILES"):  # fmt: skip
        assert f" {getattr(_limits, name)}" in text, name


def test_help_says_where_files_go() -> None:
    text = " ".join(PARSERS["run"].format_help().split())
    for where in ("audit.jsonl", "servers.log", "WASMEXEC_CACHE_DIR", "WASMEXEC_SCHEMA_CACHE", "WASMEXEC_CONFIG"):
        assert where in text, where


@pytest.mark.parametrize("command", sorted(_parsers()))
def test_help_states_the_range_of_every_number_option(command: str) -> None:
    parser = _parsers()[command]
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        limits = getattr(action.type, "range_text", "")
        high = limits.partition(" to ")[2]
        if limits:
            assert limits in text or (high and f"at most {high}" in text), (command, action.option_strings)
