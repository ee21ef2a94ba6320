"""The `wasmexec` command line. The only place that reads environment variables.

Exit codes: 0 the run succeeded, 1 the code failed (the JSON says why), 2 usage
error, 3 the sandbox itself could not be built or loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from wasmexec._version import __version__

EXIT_OK, EXIT_CODE_FAILED, EXIT_USAGE, EXIT_SANDBOX = 0, 1, 2, 3
CACHE_DIR_ENV = "WASMEXEC_CACHE_DIR"
CONFIG_ENV = "WASMEXEC_CONFIG"
DEFAULT_CONFIG = ".mcp.json"


def _int_option(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wasmexec", description="Run untrusted Python in a WebAssembly sandbox.")
    parser.add_argument("--version", action="version", version=f"wasmexec {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run Python code and print one JSON result line",
        description="Run Python code in a fresh sandbox; print the run result as one JSON line.",
    )
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("file", nargs="?", help="a Python file, or - for standard input")
    source.add_argument("-c", dest="code", metavar="CODE", help="the code to run")
    _add_run_options(run)

    serve = commands.add_parser(
        "serve",
        help="serve the run_python tool over MCP (stdio, or streamable HTTP with --http)",
        description="An MCP server with one tool, run_python, that reaches the configured servers through code.",
    )
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    serve.add_argument("--port", type=_int_option(1), default=8765, help="HTTP port (default 8765)")
    _add_run_options(serve)

    build = commands.add_parser(
        "build",
        help="build and compile the sandbox component now",
        description="Build and compile the sandbox component (otherwise done on first use).",
    )
    build.add_argument(
        "--output", type=Path, metavar="DIR", help="also write a self-contained artifact directory to ship read-only"
    )
    _add_cache_dir(build)

    commands.add_parser("schema", help="print the JSON Schema of the run result")
    from wasmexec._cli.tools import add_tools_parser

    add_tools_parser(commands, add_config_option, _add_cache_dir)
    return parser


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """Limits, config, policy and audit: shared by `run` and `serve`."""
    parser.add_argument("--timeout-ms", type=_int_option(1), help="wall-clock limit (default 30000)")
    parser.add_argument("--memory-mb", type=_int_option(1), help="memory limit in MiB (default 256)")
    fuel = parser.add_mutually_exclusive_group()
    fuel.add_argument("--fuel", type=_int_option(1), help="instruction budget (default: large)")
    fuel.add_argument("--no-fuel", action="store_true", help="turn fuel metering off (faster CPU-bound code)")
    parser.add_argument("--max-log-bytes", type=_int_option(0), help="cap of stdout and of stderr, in bytes")
    parser.add_argument("--max-result-bytes", type=_int_option(0), help="cap of the result as JSON (default 4 MiB)")
    parser.add_argument("--max-tool-calls", type=_int_option(0), help="tool calls per run (default 200)")
    parser.add_argument("--policy", type=Path, metavar="PATH", help="policy file (TOML or JSON): allow/deny/approval")
    for flag, help_text in (
        ("--allow", "only allow calls matching a 'server.tool' glob (repeatable; replaces a policy's allow-all)"),
        ("--deny", "deny calls matching a 'server.tool' glob (repeatable; deny wins over allow)"),
    ):
        parser.add_argument(flag, action="append", default=[], metavar="GLOB", help=help_text)
    parser.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="GLOB",
        help="pre-approve calls matching a 'server.tool' glob (repeatable)",
    )
    parser.add_argument(
        "--audit-log", type=Path, metavar="PATH", help="audit JSONL file (default ~/.local/state/wasmexec/audit.jsonl)"
    )
    parser.add_argument("--no-audit", action="store_true", help="write no audit log")
    add_config_option(parser)
    _add_cache_dir(parser)


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help=f"mcpServers JSON (env {CONFIG_ENV}; default ./{DEFAULT_CONFIG} if present)",
    )


def load_servers(args: argparse.Namespace) -> Any:
    """The Config named by --config, WASMEXEC_CONFIG or ./.mcp.json; None when there is none."""
    from wasmexec._tools.config import load_config

    path = args.config or os.environ.get(CONFIG_ENV) or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    if path is None:
        return None
    config = load_config(path)
    for problem in config.problems:
        print(f"warning: {problem.message} (skipped)", file=sys.stderr)
    return config


def open_broker(args: argparse.Namespace, config: Any, policy: Any = None, audit: Any = None) -> Any:
    """A Broker for the CLI, its schema cache beside the compiled artifacts."""
    from wasmexec._sandbox.artifacts import default_cache_dir
    from wasmexec._tools.broker import Broker

    cache_dir = Path(args.cache_dir or os.environ.get(CACHE_DIR_ENV) or default_cache_dir())
    return Broker(
        config,
        cache_path=cache_dir / "tool-schemas.json",
        errlog=sys.stderr,
        warn=lambda message: print(f"warning: {message}", file=sys.stderr),
        policy=policy,
        audit=audit,
    )


def load_policy_options(args: argparse.Namespace) -> Any:
    """The Policy from --policy plus --approve globs."""
    from dataclasses import replace

    from wasmexec._tools.policy import Policy, load_policy

    policy = load_policy(args.policy) if args.policy else Policy()
    allow = (*(glob for glob in policy.allow if glob != "*"), *args.allow) if args.allow else policy.allow
    return replace(
        policy, allow=allow, deny=(*policy.deny, *args.deny), pre_approved=(*policy.pre_approved, *args.approve)
    )


def open_audit(args: argparse.Namespace) -> Any:
    """The AuditLog named by --audit-log (default: the user state dir); None with --no-audit."""
    from wasmexec._audit import AuditLog, default_audit_path

    if args.no_audit:
        return None
    try:
        return AuditLog(args.audit_log or default_audit_path())
    except OSError as exc:
        print(f"warning: no audit log ({exc}); pass --audit-log PATH or --no-audit", file=sys.stderr)
        return None


def _add_cache_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help=f"where compiled artifacts are kept (env {CACHE_DIR_ENV}; default ~/.cache/wasmexec)",
    )


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def runtime_from_args(args: argparse.Namespace) -> Any:
    from wasmexec._sandbox.runtime import Runtime

    cache_dir = args.cache_dir or os.environ.get(CACHE_DIR_ENV) or None
    return Runtime(cache_dir, progress=_progress)


def _read_code(args: argparse.Namespace) -> str:
    if args.code is not None:
        return str(args.code)
    try:
        if args.file == "-":
            return sys.stdin.buffer.read().decode("utf-8")
        return Path(args.file).read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{args.file} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None


def limits_from_args(args: argparse.Namespace) -> Any:
    from wasmexec._limits import Limits

    changes: dict[str, int | None] = {}
    for option in ("timeout_ms", "memory_mb", "fuel", "max_result_bytes", "max_tool_calls"):
        if getattr(args, option) is not None:
            changes[option] = getattr(args, option)
    if args.no_fuel:
        changes["fuel"] = None
    if args.max_log_bytes is not None:
        changes["max_stdout_bytes"] = changes["max_stderr_bytes"] = args.max_log_bytes
    try:
        return Limits().replace(**changes)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


class UsageError(Exception):
    """A mistake in the command line; exit 2 with the message."""


def _command_run(args: argparse.Namespace) -> int:
    from wasmexec._audit import write_run_line
    from wasmexec._redact import Redactor
    from wasmexec._sandbox.run import execute
    from wasmexec._toolhost import NoTools

    code, limits = _read_code(args), limits_from_args(args)
    config, policy, audit = load_servers(args), load_policy_options(args), open_audit(args)
    if config is None or not config.servers:
        result, redactions = execute(runtime_from_args(args), code, limits, NoTools(), Redactor())
    else:
        with open_broker(args, config, policy, audit) as broker:
            result, redactions = execute(runtime_from_args(args), code, limits, broker, broker.redactor)
    if audit is not None:
        write_run_line(audit, result, redactions)
    sys.stdout.write(json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return EXIT_OK if result["result"]["ok"] else EXIT_CODE_FAILED


def _command_build(args: argparse.Namespace) -> int:
    runtime = runtime_from_args(args)
    written = runtime.build(args.output)
    _progress(f"wasmexec: sandbox image {runtime.sandbox_image}")
    for path in written:
        _progress(f"wasmexec: wrote {path}")
    if args.output is not None:
        _progress(f"wasmexec: ship {args.output} and run with --cache-dir {args.output} (read-only is fine)")
    return EXIT_OK


def _command_schema(args: argparse.Namespace) -> int:
    from wasmexec._envelope import run_result_json_schema

    print(json.dumps(run_result_json_schema(), indent=2))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    warnings.showwarning = _show_warning
    from wasmexec._cli.serve import command_serve
    from wasmexec._cli.tools import command_tools
    from wasmexec._exceptions import ConfigError, WasmexecError

    handlers = {"run": _command_run, "build": _command_build, "schema": _command_schema, "tools": command_tools,
                "serve": command_serve}  # fmt: skip
    try:
        return handlers[args.command](args)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"wasmexec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"wasmexec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WasmexecError as exc:
        print(f"wasmexec: error: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    except KeyboardInterrupt:
        return 130
