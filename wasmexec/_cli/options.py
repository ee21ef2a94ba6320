"""What the commands share: exit codes, options, and turning options into limits, config, broker, audit.

The only module of the package that reads environment variables (with the command
modules that call it). The commands import this module, never each other.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from wasmexec._limits import (
    DEFAULT_MAX_LLM_CALLS,
    DEFAULT_MAX_LLM_TOKENS,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_MAX_STDERR_BYTES,
    DEFAULT_MAX_STDOUT_BYTES,
    DEFAULT_MAX_TOOL_CALLS,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_MS,
    DEFAULT_WORKSPACE_FILES,
    DEFAULT_WORKSPACE_MB,
    MAX_MEMORY_MB,
    MAX_TIMEOUT_MS,
    MAX_WORKSPACE_FILES,
    MAX_WORKSPACE_MB,
)
from wasmexec._redact import PII_MODES
from wasmexec._sandbox.registry import DEFAULT_PROFILE

if TYPE_CHECKING:
    from wasmexec._audit import AuditLog
    from wasmexec._limits import Limits
    from wasmexec._sandbox.pooling import Pooling
    from wasmexec._sandbox.runtime import ImageRuntime
    from wasmexec._tools.broker import Broker
    from wasmexec._tools.config import Config
    from wasmexec._tools.config_import import Place
    from wasmexec._tools.policy import Policy

#: Exit codes (docs/cli.md, "Exit status"): the run failed, usage, no sandbox, cannot listen, Ctrl-C (128 + SIGINT).
EXIT_OK, EXIT_CODE_FAILED, EXIT_USAGE, EXIT_SANDBOX, EXIT_LISTEN, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
#: The reader of stdout went away (`| head`): 128 + SIGPIPE, what a program killed by SIGPIPE reports.
EXIT_BROKEN_PIPE = 141

CACHE_DIR_ENV = "WASMEXEC_CACHE_DIR"
CONFIG_ENV = "WASMEXEC_CONFIG"
SCHEMA_CACHE_ENV = "WASMEXEC_SCHEMA_CACHE"
DEFAULT_CONFIG = ".mcp.json"
#: `--config auto`: the other clients' configs, read where they are (a file named "auto" is ./auto).
AUTO_CONFIG = "auto"
#: The stdio servers' stderr file starts over past this: banners and errors, not an archive.
SERVER_LOG_MAX_BYTES = 8 * 1024 * 1024


class UsageError(Exception):
    """A mistake in the command line; exit 2 with the command's usage and the message."""


def int_option(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer (underscores allowed) from `low` to `high`."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    # What --help states (`CommandParser`): the whole range, or the floor when it says something.
    parse.range_text = f"{low} to {high}" if high is not None else (f"at least {low}" if low > 0 else "")  # type: ignore[attr-defined]
    return parse


def add_run_options(parser: argparse.ArgumentParser, *, ceilings: bool) -> None:
    """Limits, tools, policy, audit and cache: shared by `run` and `serve` (for serve the limits are ceilings)."""
    title = "limits (ceilings: a run_python call may ask for less, never more)" if ceilings else "limits"
    limits = parser.add_argument_group(title)
    limits.add_argument(
        "--timeout-ms",
        type=int_option(1, MAX_TIMEOUT_MS),
        metavar="N",
        help=f"wall-clock limit in ms (default {DEFAULT_TIMEOUT_MS}, at most {MAX_TIMEOUT_MS})",
    )
    limits.add_argument(
        "--memory-mb",
        type=int_option(1, MAX_MEMORY_MB),
        metavar="N",
        help=f"memory limit in MiB (default {DEFAULT_MEMORY_MB}, at most {MAX_MEMORY_MB})",
    )
    fuel = limits.add_mutually_exclusive_group()
    fuel.add_argument(
        "--fuel",
        type=int_option(1),
        metavar="N",
        help="instruction budget, for deterministic cut-offs (default: none, the timeout limits CPU time; "
        "metering costs CPU-bound code 9-35%% of its speed)",
    )
    fuel.add_argument("--no-fuel", action="store_true", help="no instruction budget (the default)")
    limits.add_argument(
        "--max-log-bytes",
        type=int_option(0),
        metavar="N",
        help=f"cap of stdout and of stderr, each, in bytes (default {DEFAULT_MAX_STDOUT_BYTES} "
        f"for stdout, {DEFAULT_MAX_STDERR_BYTES} for stderr)",
    )
    limits.add_argument(
        "--max-result-bytes",
        type=int_option(0),
        metavar="N",
        help=f"cap of the result as JSON, in bytes (default {DEFAULT_MAX_RESULT_BYTES})",
    )
    limits.add_argument("--max-tool-calls", type=int_option(0), metavar="N",
                        help=f"tool calls per run (default {DEFAULT_MAX_TOOL_CALLS})")  # fmt: skip
    limits.add_argument("--max-llm-calls", type=int_option(0), metavar="N",
                        help=f"codemode.llm.ask calls per run (default {DEFAULT_MAX_LLM_CALLS})")  # fmt: skip
    limits.add_argument("--max-llm-tokens", type=int_option(0), metavar="N",
                        help=f"tokens of llm.ask answers per run (default {DEFAULT_MAX_LLM_TOKENS})")  # fmt: skip
    limits.add_argument(
        "--workspace-mb",
        type=int_option(0, MAX_WORKSPACE_MB),
        metavar="N",
        help=f"MiB in /workspace and /tmp together, inputs included (default {DEFAULT_WORKSPACE_MB}, "
        f"at most {MAX_WORKSPACE_MB})",
    )
    limits.add_argument(
        "--workspace-files",
        type=int_option(0, MAX_WORKSPACE_FILES),
        metavar="N",
        help=f"files, directories and symlinks in /workspace and /tmp together (default {DEFAULT_WORKSPACE_FILES}, "
        f"at most {MAX_WORKSPACE_FILES})",
    )
    workspace = parser.add_argument_group("workspace")
    if not ceilings:
        add_workspace_options(workspace)
    workspace.add_argument(
        "--skills", type=Path, metavar="DIR", help="a directory mounted read-only at /skills in every run "
        "(its *.py import as skills.<name>)",
    )  # fmt: skip
    tools = parser.add_argument_group("tools and policy")
    add_config_option(tools)
    tools.add_argument("--policy", type=Path, metavar="PATH", help="policy file (TOML or JSON): allow/deny/approval")
    tools.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="GLOB",
        help="only allow calls matching a 'server.tool' glob, protocol or Python names, e.g. 'github.create_*' "
        "(repeatable; replaces a policy's allow-all)",
    )
    tools.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="GLOB",
        help="deny calls matching a 'server.tool' glob, protocol or Python names (repeatable; deny wins)",
    )
    tools.add_argument("--approve", action="append", default=[], metavar="GLOB",
                       help="pre-approve calls matching a 'server.tool' glob, protocol or Python names "
                       "(repeatable)")  # fmt: skip
    tools.add_argument("--pii", choices=PII_MODES, metavar="MODE",
                       help="e-mails, phone numbers, cards, IBANs and SSNs in tool results: 'tokenize' (stable "
                       "tokens the code can pass back to tools), 'redact', or 'off' (default: the policy's, "
                       "else off)")  # fmt: skip
    add_server_stderr_option(tools)
    files = parser.add_argument_group("files")
    audit = files.add_mutually_exclusive_group()
    audit.add_argument("--audit-log", type=Path, metavar="PATH",
                       help=f"audit JSONL file (default {_default_audit_path()})")  # fmt: skip
    audit.add_argument("--no-audit", action="store_true", help="write no audit log")
    add_cache_dir_option(files)


def add_workspace_options(parser: argparse._ActionsContainer) -> None:
    """Files in and out of one run (`run` only)."""
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        dest="inputs",
        metavar="LOCAL",
        help="copy the local file LOCAL into /workspace before the run; LOCAL:PATH puts it at PATH "
        "(relative to /workspace; default: its name) (repeatable)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="write the run's artifacts (files it created or changed in /workspace) below DIR; "
        "existing files are never overwritten (skipped with a warning)",
    )
    parser.add_argument(
        "--workspace", type=Path, metavar="DIR", help="run in DIR (created if missing) as /workspace instead of a "
        "fresh private directory; what the code writes there stays",
    )  # fmt: skip


def add_config_option(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="PATH",
        help=f"mcpServers JSON (env {CONFIG_ENV}; default ./{DEFAULT_CONFIG} if present); 'auto': read the servers "
        "of Claude Code, Cursor, VS Code, Windsurf, Cline and Claude Desktop where they are",
    )


def add_server_stderr_option(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--server-stderr",
        action="store_true",
        help=f"show stdio servers' stderr (banners, errors) here instead of appending it to {server_log_path()}",
    )


def add_cache_dir_option(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help=f"where compiled artifacts are kept (env {CACHE_DIR_ENV}; default {_default_cache_dir()})",
    )


_CONFIG_HELP = f"{CONFIG_ENV} (the --config default)"
_SCHEMA_CACHE_HELP = f"{SCHEMA_CACHE_ENV} (the tool schema cache file; default tool-schemas.json in the user cache dir)"
#: The environment variables the tool commands read (the epilog of their --help).
TOOLS_ENVIRONMENT_HELP = (
    f"environment: {_CONFIG_HELP}, {_SCHEMA_CACHE_HELP}, XDG_STATE_HOME (where the servers' stderr goes)"
)
#: The environment variables `run` and `serve` read.
ENVIRONMENT_HELP = (
    f"environment: {_CONFIG_HELP}, {CACHE_DIR_ENV} (the --cache-dir default), {_SCHEMA_CACHE_HELP}, "
    "XDG_STATE_HOME (where the audit log and the servers' stderr go)"
)


def limits_from_args(args: argparse.Namespace) -> Limits:
    """The Limits the options ask for (the defaults where they say nothing)."""
    from wasmexec._limits import Limits

    changes: dict[str, int | None] = {}
    for option in ("timeout_ms", "memory_mb", "fuel", "max_result_bytes", "max_tool_calls", "max_llm_calls",
                   "max_llm_tokens", "workspace_mb", "workspace_files"):  # fmt: skip
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


def skills_from_args(args: argparse.Namespace) -> Path | None:
    """The --skills directory, checked to exist."""
    skills: Path | None = args.skills
    if skills is not None and not skills.is_dir():
        raise UsageError(f"--skills {skills}: not a directory")
    return skills


def load_servers(args: argparse.Namespace) -> Config | None:
    """The Config named by --config, WASMEXEC_CONFIG or ./.mcp.json; None when there is none.

    ``auto`` reads the other clients' configs in place (`wasmexec._tools.config_import`).
    """
    path = args.config or os.environ.get(CONFIG_ENV) or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    if path is None:
        return None
    from wasmexec._tools.config import load_config  # only now: a plain run does not pay for it

    if str(path) == AUTO_CONFIG:
        from wasmexec._tools.config_import import auto_config

        config = auto_config(user_place())
    else:
        config = load_config(path)
    for note in config.notes:
        print(f"note: {note.message}", file=sys.stderr)
    for problem in config.problems:
        print(f"warning: {problem.message} (skipped)", file=sys.stderr)
    return config


def user_place() -> Place:
    """Where the user's client configs are: home, the current directory, this platform and environment."""
    from wasmexec._tools.config_import import Place

    return Place(home=Path.home(), cwd=Path.cwd(), environ=dict(os.environ))


def load_policy_options(args: argparse.Namespace) -> Policy | None:
    """The Policy from --policy plus the --allow, --deny and --approve globs; None (the default) without them."""
    if not (args.policy or args.allow or args.deny or args.approve):
        return None  # a run without tools then never loads the policy module
    from wasmexec._tools.policy import Policy, load_policy

    policy = load_policy(args.policy) if args.policy else Policy()
    allow = (*(glob for glob in policy.allow if glob != "*"), *args.allow) if args.allow else policy.allow
    return replace(
        policy, allow=allow, deny=(*policy.deny, *args.deny), pre_approved=(*policy.pre_approved, *args.approve)
    )


def open_audit(args: argparse.Namespace) -> AuditLog | None:
    """The AuditLog named by --audit-log (default: the user state dir); None with --no-audit."""
    from wasmexec._audit import AuditLog

    if args.no_audit:
        return None
    try:
        return AuditLog(args.audit_log or _default_audit_path(), replica=getattr(args, "replica_id", None))
    except OSError as exc:
        print(f"warning: no audit log ({exc}); pass --audit-log PATH or --no-audit", file=sys.stderr)
        return None


def schema_cache_path() -> Path:
    """Where tool schemas persist: WASMEXEC_SCHEMA_CACHE, else the user cache dir (never a shipped artifact dir)."""
    return Path(os.environ.get(SCHEMA_CACHE_ENV) or _default_cache_dir() / "tool-schemas.json")


def server_log_path() -> Path:
    """Where stdio servers' stderr goes: beside the audit log, in the user state dir."""
    return _default_audit_path().with_name("servers.log")


@contextmanager
def opened_broker(
    args: argparse.Namespace, config: Config, policy: Policy | None = None, audit: AuditLog | None = None
) -> Iterator[Broker]:
    """An open Broker over `config`; its servers' stderr goes to the server log (or here with --server-stderr)."""
    from wasmexec._tools.broker import Broker

    with _server_errlog(args.server_stderr) as errlog:
        broker = Broker(config, cache_path=schema_cache_path(), errlog=errlog, warn=_warn, policy=policy, audit=audit,
                        pii=getattr(args, "pii", None))  # fmt: skip
        with broker:  # closed before the errlog: the servers it stops may still write to it
            yield broker


@contextmanager
def _server_errlog(to_terminal: bool) -> Iterator[TextIO]:
    if to_terminal:
        yield sys.stderr
        return
    path = server_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > SERVER_LOG_MAX_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
        log = path.open("a", encoding="utf-8")
    except OSError as exc:
        _warn(f"cannot write the server log {path} ({exc.strerror or exc}); servers' stderr goes here")
        yield sys.stderr
        return
    with log:
        yield log


def add_profile_option(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--profile",
        type=_profile_name,
        metavar="NAME",
        default=DEFAULT_PROFILE,
        help='the guest image: default, science (numpy, pandas, matplotlib; pip install "wasmexec[science]", '
        "then wasmexec build --profile science), or one you built with wasmexec build --requirements",
    )


def add_user_profile_options(parser: argparse._ActionsContainer) -> None:
    """`build`'s options for a user profile (docs/profiles.md)."""
    parser.add_argument(
        "--requirements",
        type=Path,
        metavar="FILE",
        help="build profile NAME (--profile) with these pure-Python packages (pip's format)",
    )
    parser.add_argument(
        "--base",
        default=DEFAULT_PROFILE,
        metavar="NAME",
        help="the built-in profile a --requirements profile adds to: default or science",
    )
    parser.add_argument("--find-links", type=Path, metavar="DIR",
                        help="take wheels from DIR only, without the package index")  # fmt: skip


def _profile_name(text: str) -> str:
    from wasmexec._sandbox.registry import check_profile

    try:
        return check_profile(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def runtime_from_args(args: argparse.Namespace, profile: str | None = None) -> ImageRuntime[Any]:
    """The runtime of `profile` (default: --profile) whose compiled artifacts live in --cache-dir (or
    WASMEXEC_CACHE_DIR, or the user cache dir); a UsageError for a profile that is not built."""
    from wasmexec._sandbox import registry

    cache_dir = args.cache_dir or os.environ.get(CACHE_DIR_ENV) or None
    name = profile or getattr(args, "profile", None) or DEFAULT_PROFILE
    try:
        return registry.runtime(name, cache_dir, progress, pooling=pooling_from_args(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def user_profile_from_args(args: argparse.Namespace) -> ImageRuntime[Any]:
    """``build --profile NAME --requirements FILE``: the user profile built (docs/profiles.md)."""
    from wasmexec._userprofile.profile_build import build_profile

    cache_dir = args.cache_dir or os.environ.get(CACHE_DIR_ENV) or None
    try:
        return build_profile(args.profile, args.requirements, args.base, args.find_links, cache_dir, progress)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def pooling_from_args(args: argparse.Namespace) -> Pooling | None:
    """The pooling allocator ``serve --pooling`` asks for (None: the default, on-demand allocator)."""
    from wasmexec._sandbox.pooling import Pooling

    slots = getattr(args, "pooling", None)
    resident = getattr(args, "pooling_keep_resident_mb", 0)
    if slots is None:
        if resident:
            raise UsageError("--pooling-keep-resident-mb needs --pooling SLOTS")
        return None
    runs = getattr(args, "max_concurrent_runs", 1)
    if slots < runs:  # spares take slots too, but a spare that finds none is only a miss
        raise UsageError(f"--pooling {slots} is fewer than --max-concurrent-runs {runs}: the runs over it would fail")
    return Pooling(slots, resident)


def progress(message: str) -> None:
    """A progress line for the user (stderr: stdout belongs to the result)."""
    print(message, file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _default_audit_path() -> Path:
    from wasmexec._audit import default_audit_path

    return default_audit_path()


def _default_cache_dir() -> Path:
    from wasmexec._sandbox.image_cache import default_cache_dir

    return default_cache_dir()
