"""`wasmexec config …`: bring the MCP servers of other clients into a wasmexec config.

    wasmexec config import [--from CLIENT|PATH]… [--output FILE] [--force]

finds the configs of Claude Code, Cursor, VS Code, Windsurf, Cline, Roo Code and Claude
Desktop in their standard places (`wasmexec._tools.config_import`), merges them and writes
one `mcpServers` file (mode 0600: it may hold secrets; never over an existing file without
--force; ``--output -`` prints it). What was merged, left out or dropped is said on stderr.

Exit codes: 0 written, 1 no servers found, 2 usage error (or the output exists).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from wasmexec._cli.options import DEFAULT_CONFIG, EXIT_CODE_FAILED, EXIT_OK, user_place


def add_config_parser(commands: Any) -> None:
    from wasmexec._tools.config_import import CLIENTS

    config = commands.add_parser("config", help="import the MCP servers other clients are configured with",
                                 description="Work with MCP server configs.")  # fmt: skip
    verbs = config.add_subparsers(dest="verb", required=True, metavar="VERB")
    importing = verbs.add_parser(
        "import",
        help="write a config from the servers of Claude Code, Cursor, VS Code, Windsurf, Cline, Claude Desktop",
        description="Find the MCP server configs of other clients in their standard places, merge them (the first "
        f"client in this order wins a name: {', '.join(CLIENTS)}) and write one mcpServers config. ${{VAR}} references "
        "are kept, never expanded into the file. `--config auto` reads the same servers in place instead.",
    )
    importing.add_argument(
        "--from", dest="sources", action="append", default=[], metavar="SOURCE",
        help=f"a client ({', '.join(CLIENTS)}) or a config file (repeatable; default: every client)",
    )  # fmt: skip
    importing.add_argument("--output", metavar="FILE", default=DEFAULT_CONFIG,
                           help=f"where to write (default ./{DEFAULT_CONFIG}; - prints it)")  # fmt: skip
    importing.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    importing.set_defaults(handler=command_import, parser=importing)


def command_import(args: argparse.Namespace) -> int:
    from wasmexec._tools.config import parse_config
    from wasmexec._tools.config_import import CLIENTS, gather, write_config

    merged = gather(args.sources or list(CLIENTS), user_place())
    for read in merged.read:
        print(f"read {read}", file=sys.stderr)
    for note in merged.notes:
        print(f"note: {note}", file=sys.stderr)
    if not merged.entries:
        print("wasmexec: no MCP servers found in the clients' configs", file=sys.stderr)
        return EXIT_CODE_FAILED
    check = parse_config(merged.document(), source="the imported config", workspace=Path.cwd())
    for problem in check.problems:  # as `run` would see it now: missing variables, unsupported transports
        print(f"warning: {problem.message}", file=sys.stderr)
    if args.output == "-":
        print(json.dumps(merged.document(), indent=2, ensure_ascii=False))
    else:
        write_config(merged, Path(args.output), force=args.force)
        print(f"wrote {len(merged.entries)} servers to {args.output}: {', '.join(merged.entries)}", file=sys.stderr)
    return EXIT_OK
