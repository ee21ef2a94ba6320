"""The argument parser every `wasmexec` command uses: no abbreviations, unknown options named.

argparse by default takes a prefix of an option for the option (``--timeout 5`` would be
``--timeout-ms 5``: 5 ms) and reports a misspelt option only after everything else, often
as a confusing clash (``run --memroy-mb 10 -c 1`` said "argument -c: not allowed with
argument FILE", having taken ``10`` for the file). This parser turns abbreviations off
and checks every option before parsing, naming the unknown one and the closest known.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any

_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser without abbreviations that names an unknown option with a suggestion.

    Subcommand parsers made with ``add_subparsers().add_parser`` are of this class too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        arguments = list(sys.argv[1:] if args is None else args)
        self._check_options(arguments)
        return super().parse_known_args(arguments, namespace)

    def format_help(self) -> str:
        for action in self._actions:
            action.help = _with_range(action)
        return super().format_help()

    def _check_options(self, arguments: list[str]) -> None:
        """Fails on the first option this parser does not know (a subcommand checks its own)."""
        known = self._option_string_actions
        commands = self._subparsers is not None
        index = 0
        while index < len(arguments):
            token = arguments[index]
            index += 1
            if token == "--":
                return  # everything after it is an operand
            if not token.startswith("-") or token == "-" or _NUMBER.fullmatch(token):
                if commands:
                    return  # the subcommand's arguments: its parser checks them
                continue
            name = token.split("=", 1)[0]
            action = known.get(name) or (known.get(token[:2]) if not token.startswith("--") else None)
            if action is None:
                self.error(_unknown(name, [option for option in known if option.startswith("--")]))
            elif name == token and action.nargs is None and token in known:
                index += 1  # the option's value, whatever it looks like (e.g. -c "-x")


def _with_range(action: argparse.Action) -> str | None:
    """The option's help with its range (from `int_option`) when the help does not state it already."""
    text = action.help
    limits: str = getattr(action.type, "range_text", "")
    if not limits or text is None or text == argparse.SUPPRESS or "at most" in text or limits in text:
        return text
    if text.endswith(")") and "(default " in text:
        return f"{text[:-1]}; {limits})"
    return f"{text} ({limits})"


def _unknown(option: str, options: list[str]) -> str:
    import difflib  # only for a mistake: not on every start

    close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
    suggestion = f"; did you mean {close[0]}?" if close else ""
    return f"unrecognized option {option}{suggestion}"
