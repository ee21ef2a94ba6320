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

from wasmexec._cli.options import (
    DEFAULT_CONFIG,
    EXIT_CODE_FAILED,
    EXIT_OK,
    TOOLS_ENVIRONMENT_HELP,
    UsageError,
    add_config_option,
    load_servers,
    user_place,
)


def add_config_parser(commands: Any) -> None:
    from wasmexec._tools.config_import import CLIENTS

    config = commands.add_parser("config", help="import other clients' MCP servers; sign in to OAuth servers",
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
    login = verbs.add_parser(
        "login",
        help="sign in to an HTTP server that uses OAuth, and store its token",
        description="Sign in to an OAuth-protected HTTP MCP server now: prints the URL to open, takes the browser's "
        "redirect on 127.0.0.1, and keeps the token (and its refresh token) in the user state dir, mode 0600. "
        "Runs and `serve` then use and refresh it without asking.",
        epilog=TOOLS_ENVIRONMENT_HELP,
    )
    login.add_argument("server", metavar="SERVER", help="the server id")
    add_config_option(login)
    login.set_defaults(handler=command_login, parser=login)


def command_import(args: argparse.Namespace) -> int:
    from wasmexec._tools.config import parse_config
    from wasmexec._tools.config_import import CLIENTS, gather, write_config

    merged = gather(args.sources or list(CLIENTS), user_place())
    for read in merged.read:
        print(f"read {read}", file=sys.stderr)
    for note in merged.notes:
        print(f"note: {note}", file=sys.stderr)
    if not merged.entries:  # still a valid config: `serve --config FILE` starts, with run_python alone
        print("note: no MCP servers found in the clients' configs; the config is empty (add servers to it)",
              file=sys.stderr)  # fmt: skip
    check = parse_config(merged.document(), source="the imported config", workspace=Path.cwd())
    for problem in check.problems:  # as `run` would see it now: missing variables, unsupported transports
        print(f"warning: {problem.message}", file=sys.stderr)
    if args.output == "-":
        print(json.dumps(merged.document(), indent=2, ensure_ascii=False))
    else:
        write_config(merged, Path(args.output), force=args.force)
        names = f"{len(merged.entries)} servers to {args.output}: {', '.join(merged.entries)}"
        print(f"wrote {names}" if merged.entries else f"wrote an empty config to {args.output}", file=sys.stderr)
    return EXIT_OK


def command_login(args: argparse.Namespace) -> int:
    import anyio

    from wasmexec._tools import oauth

    config = load_servers(args)
    server = config.servers.get(args.server) if config is not None else None
    if server is None:
        raise UsageError(f"no MCP server {args.server!r} is configured (pass --config PATH)")
    if server.transport == "stdio" or not oauth.wanted(server):
        raise UsageError(f"server {args.server!r} does not use OAuth (an HTTP server without an Authorization "
                         'header, or with "oauth" set)')  # fmt: skip
    try:
        anyio.run(_connect, server)
    except Exception as exc:  # the server's or the flow's failure, whatever its type: one line, exit 1
        print(f"wasmexec: signing in to {args.server!r} failed: {_reason(exc)}", file=sys.stderr)
        return EXIT_CODE_FAILED
    stored = oauth.token_file(oauth.default_token_dir(), server)
    print(f"wasmexec: signed in to {args.server!r}; the token is in {stored}", file=sys.stderr)
    return EXIT_OK


async def _connect(server: Any) -> None:
    """Connects once (signing in if the server asks), then lists the tools to prove the token works."""
    from mcp import Client

    from wasmexec._tools.oauth import LOGIN_TIMEOUT_S
    from wasmexec._tools.transports import http_transport, sse_transport

    opener = sse_transport if server.transport == "sse" else http_transport
    async with Client(opener(server, sign_in_timeout=LOGIN_TIMEOUT_S), cache=None) as client:
        await client.list_tools()


def _reason(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
