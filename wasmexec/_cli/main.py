"""The `wasmexec` command line: the parsers and the dispatch to each command.

Exit codes (docs/cli.md, "Exit status"): 0 the run succeeded, 1 the code failed (the JSON says
why), 2 usage error, 3 the sandbox itself could not be built or loaded, 4 `serve
--http` could not listen, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from wasmexec._cli.options import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SANDBOX,
    EXIT_USAGE,
    UsageError,
    add_cache_dir_option,
    add_profile_option,
    add_user_profile_options,
    progress,
    runtime_from_args,
    user_profile_from_args,
)
from wasmexec._cli.parser import CommandParser
from wasmexec._cli.startup_gc import started
from wasmexec._version import __version__


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `wasmexec` parser; with `command`, of that command alone (all that `wasmexec COMMAND …` needs)."""
    parser = CommandParser(prog="wasmexec", description="Run untrusted Python in a WebAssembly sandbox.")
    parser.add_argument("--version", action="version", version=f"wasmexec {__version__}")
    # Not required: bare `wasmexec` prints the help, which lists the commands (main()).
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, add_parser in _COMMANDS.items():
        if command is None or name == command:
            add_parser(commands)
    return parser


def _add_build_parser(commands: Any) -> None:
    build = commands.add_parser(
        "build",
        help="build and compile the sandbox component now",
        description="Build and compile the sandbox component (otherwise done on first use). "
        "The science profile is never built on first use: build it with --profile science (a few minutes, 3 GiB). "
        "With --requirements, build your own profile NAME: pure-Python packages on top of --base.",
    )
    build.add_argument(
        "--output", type=Path, metavar="DIR", help="also write a self-contained artifact directory to ship read-only"
    )
    add_cache_dir_option(build)
    add_profile_option(build)
    add_user_profile_options(build)
    build.set_defaults(handler=_command_build, parser=build)


def _add_schema_parser(commands: Any) -> None:
    schema = commands.add_parser("schema", help="print the JSON Schema of the run result")
    schema.set_defaults(handler=_command_schema, parser=schema)


def _add_run_parser(commands: Any) -> None:
    from wasmexec._cli.run_command import add_run_parser  # here, not above: only the command given is imported

    add_run_parser(commands)


def _add_serve_parser(commands: Any) -> None:
    from wasmexec._cli.serve import add_serve_parser  # here, not above: only the command given is imported

    add_serve_parser(commands)


def _add_tools_parser(commands: Any) -> None:
    from wasmexec._cli.tools import add_tools_parser  # here, not above: only the command given is imported

    add_tools_parser(commands)


def _add_config_parser(commands: Any) -> None:
    from wasmexec._cli.config_command import add_config_parser  # here, not above: only the command given is imported

    add_config_parser(commands)


def _add_cache_parser(commands: Any) -> None:
    from wasmexec._cli.cache import add_cache_parser  # here, not above: only the command given is imported

    add_cache_parser(commands)


#: Every command, in the order `wasmexec --help` lists them, and what adds its parser. A start builds
#: (and imports) the parser of the command given only: all of them cost every start 35 ms (issue 19).
_COMMANDS: dict[str, Callable[[Any], None]] = {
    "run": _add_run_parser,
    "serve": _add_serve_parser,
    "build": _add_build_parser,
    "schema": _add_schema_parser,
    "tools": _add_tools_parser,
    "config": _add_config_parser,
    "cache": _add_cache_parser,
}


def _command_build(args: argparse.Namespace) -> int:
    from wasmexec._cli.cache import cache_usage

    runtime = user_profile_from_args(args) if args.requirements else runtime_from_args(args)  # follows --profile
    written = runtime.build(args.output)
    progress(f"wasmexec: {runtime.image.label} {runtime.sandbox_image}")
    for path in written:
        progress(f"wasmexec: wrote {path}")
    if args.output is not None:
        progress(f"wasmexec: ship {args.output} and run with --cache-dir {args.output} (read-only is fine)")
    cache_usage(runtime.artifacts.directory)
    return EXIT_OK


def _command_schema(args: argparse.Namespace) -> int:
    from wasmexec._envelope import run_result_json_schema

    print(json.dumps(run_result_json_schema(), indent=2))
    return EXIT_OK


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    # The first word names the command (the top level has no option that takes a value); anything
    # else (an option, a misspelt command, nothing) gets the whole parser, whose help lists them all.
    chosen = arguments[0] if arguments and arguments[0] in _COMMANDS else None
    parser = build_parser(chosen)
    args = parser.parse_args(arguments)
    if args.command is None:  # bare `wasmexec`: what it can do
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    warnings.showwarning = _show_warning
    if args.command != "run":  # `run` says so itself once its sandbox is ready (command_run)
        started()
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # here, not at exit, where a closed pipe could only be reported
    except BrokenPipeError:  # `wasmexec tools list | head`: the reader left, which is not an error of ours
        _silence_stdout()
        code = EXIT_BROKEN_PIPE
    if argv is None and args.command in _FAST_EXIT:
        _exit_now(code)
    return code


#: Commands whose process ends without the interpreter's teardown (`_exit_now`): a `run` process has
#: done its one run by then, and tearing down the ~200 modules and the wasmtime objects it loaded
#: costs its start 20–30 ms of CPU (issue 19) for nothing anyone sees.
_FAST_EXIT = frozenset({"run"})


def _exit_now(code: int) -> None:
    """Ends the process with `code` after the exit hooks and the last flush, skipping the interpreter's teardown.

    What teardown would do that matters happens here: the atexit hooks (the spare pool stopped and
    its instances closed, the run directories and the artifact store removed) and the flush of
    stdout and stderr. What it would do besides is freeing memory the kernel frees anyway, and
    finalizing wasmtime objects, which is where WASI output callbacks must never run. Every thread
    left is a daemon (the epoch ticker), which teardown would not wait for either. Only for the
    process's own `main()` (argv None): a caller of `main([...])` keeps its interpreter.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (the status says so already) or a stream closed
            pass
    os._exit(code)


def _silence_stdout() -> None:
    """Points stdout at /dev/null, so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _dispatch(args: argparse.Namespace) -> int:
    from wasmexec._exceptions import ConfigError, WasmexecError

    command: argparse.ArgumentParser = args.parser
    try:
        code: int = args.handler(args)
        return code
    except UsageError as exc:
        command.print_usage(sys.stderr)
        print(f"{command.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"wasmexec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WasmexecError as exc:
        print(f"wasmexec: error: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
