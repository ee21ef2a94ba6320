"""`wasmexec serve`: wires the runtime, broker, policy and audit log into the MCP server.

Over HTTP the socket is bound before anything says "serving": a port that is taken
(or not allowed, or a host that does not resolve) is a one-line error and exit 4.
The HTTP app also answers ``GET /healthz`` and ``GET /metrics``, refuses new runs with
503 when full, and checks ``Host``/``Origin`` against loopback plus the names given
with ``--allowed-host``/``--allowed-origin`` (`wasmexec._server.http_app`).

Profiles: ``--profile default --profile science`` (or ``--profile default,science``) offers
both guest images; the first is the default and `run_python` gains a `profile` argument.
Every profile is loaded before the server answers: the science image is never built here
(minutes, 3 GiB: an MCP client would time out), so when it is missing the start fails at
once, saying to run ``wasmexec build --profile science``.

State: ``--state-dir DIR`` (default: the user state dir) holds sessions, artifacts, PII vaults
and approval records (`wasmexec._state.directory`), sealed with ``--state-key-file`` (default:
a key DIR keeps for itself). Every replica of a set is pointed at the same DIR and key file,
and then serves any session and artifact. Sessions outlive the server until their idle TTL
passes; `--session-ttl`, `--max-sessions` and `--sessions-mb` bound them over the whole DIR,
and `--max-sessions 0` turns them off.

SIGTERM and SIGINT stop either transport the same way (`wasmexec._server.shutdown`): runs are
stopped and audited, then the transport stops, then everything the server made is closed and
removed (the exit stack below, in reverse order), and the exit status is 0. Over HTTP, SIGTERM
first drains for up to ``--drain-timeout`` seconds: no new runs, the runs in flight finish and
answer. ``--replica-id`` (default host and pid) names this process in ``/healthz`` and on every
audit line, so a replica set's shared logs say which replica did what.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmexec._cli.auth_options import add_auth_options, announce, authenticator_from_args
from wasmexec._cli.options import (
    ENVIRONMENT_HELP,
    EXIT_LISTEN,
    EXIT_OK,
    UsageError,
    add_run_options,
    int_option,
    limits_from_args,
    load_policy_options,
    load_servers,
    open_audit,
    opened_broker,
    runtime_from_args,
    server_log_path,
    skills_from_args,
)
from wasmexec._sandbox.pooling import MAX_KEEP_RESIDENT_MB, MAX_POOL_SLOTS
from wasmexec._sandbox.registry import DEFAULT_PROFILE, check_profile
from wasmexec._sandbox.spares import DEFAULT_SPARES, MAX_SPARES, SpareStats
from wasmexec._state.sessions import DEFAULT_MAX_SESSION_BYTES, DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL_S

if TYPE_CHECKING:
    import socket

    from wasmexec._limits import Limits
    from wasmexec._sandbox.runtime import ImageRuntime
    from wasmexec._sandbox.sandbox import Sandbox
    from wasmexec._server.auth import Authenticator
    from wasmexec._server.http_app import ASGIApp
    from wasmexec._server.server import RunPythonServer, ServeOptions
    from wasmexec._state.directory import StateDir
    from wasmexec._state.key import StateKey
    from wasmexec._tools.broker import Broker

#: The loopback address: serving beyond this machine is a deliberate choice (--host).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_PORT = 65535
#: Pending connections the kernel queues while the server starts (uvicorn's default).
LISTEN_BACKLOG = 2048
#: Mirrors `wasmexec._sandbox.sandbox.DEFAULT_MAX_CONCURRENT_RUNS` and `wasmexec._server.admission.
#: DEFAULT_MAX_QUEUED_RUNS` without importing them (the parser is built on every start).
DEFAULT_MAX_CONCURRENT_RUNS = 8
DEFAULT_MAX_QUEUED_RUNS = 16
MAX_RUNS = 1024
_MIB = 1024 * 1024
#: Mirrors `wasmexec._server.shutdown.DEFAULT_DRAIN_TIMEOUT_S` (the parser is built on every start).
DEFAULT_DRAIN_TIMEOUT_S = 30
#: A drain longer than an hour is a stuck process, not a drain.
MAX_DRAIN_TIMEOUT_S = 3600


def add_serve_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve the run_python tool over MCP (stdio, or streamable HTTP with --http)",
        description="An MCP server with one tool, run_python, that reaches the configured servers through code. "
        "The limits below are ceilings: a run_python call may lower them, never raise them.",
        epilog=ENVIRONMENT_HELP,
    )
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", default=DEFAULT_HOST, metavar="HOST", help=f"HTTP address (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int_option(1, MAX_PORT), default=DEFAULT_PORT, metavar="PORT",
                       help=f"HTTP port (default {DEFAULT_PORT}; 1 to {MAX_PORT})")  # fmt: skip
    runs = serve.add_argument_group("load")
    runs.add_argument("--max-concurrent-runs", type=int_option(1, MAX_RUNS), default=DEFAULT_MAX_CONCURRENT_RUNS,
                      metavar="N", help=f"runs executing at once (default {DEFAULT_MAX_CONCURRENT_RUNS})")  # fmt: skip
    runs.add_argument("--pooling", type=int_option(1, MAX_POOL_SLOTS), metavar="SLOTS",
                      help="use wasmtime's pooling allocator: SLOTS sandboxes per profile and limit mode alive at "
                      "once, runs and spares together (at least --max-concurrent-runs plus the spares; a run over that "
                      "fails). Off by default: it pays on many threads, not for one run at a time")  # fmt: skip
    runs.add_argument("--pooling-keep-resident-mb", type=int_option(0, MAX_KEEP_RESIDENT_MB), default=0, metavar="MB",
                      help="with --pooling: memory of each slot kept resident and reset in place between runs, "
                      "fewer page faults for a memset (default 0)")  # fmt: skip
    runs.add_argument("--max-queued-runs", type=int_option(0, MAX_RUNS), default=DEFAULT_MAX_QUEUED_RUNS,
                      metavar="N", help=f"runs waiting for a slot; more calls are refused as retryable (HTTP 503 with "
                      f"Retry-After) (default {DEFAULT_MAX_QUEUED_RUNS})")  # fmt: skip
    runs.add_argument("--spares", type=int_option(0, MAX_SPARES), default=DEFAULT_SPARES, metavar="N",
                      help=f"the most instances kept ready ahead of time per kind of run, each used by one run "
                      f"(default {DEFAULT_SPARES}, at most {MAX_SPARES}; 0 turns them off; about 1.5 MiB of memory "
                      "each, 3 MiB with --profile science)")  # fmt: skip
    proxy = serve.add_argument_group("behind a reverse proxy (with --http)")
    proxy.add_argument("--allowed-host", action="append", default=[], metavar="HOST",
                       help="also accept this Host header (e.g. mcp.example.com; without a port, any port); "
                       "loopback is always accepted; repeatable")  # fmt: skip
    proxy.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="also accept this Origin header (e.g. https://app.example.com); repeatable")  # fmt: skip
    _add_replica_options(serve)
    serve.add_argument("--profile", action="append", type=_profile_list, dest="profiles", metavar="NAME",
                       help="the guest image(s) to offer: default, science (numpy, pandas, …; build it first with "
                       "wasmexec build --profile science); repeatable or comma-separated; with more than one, "
                       "run_python takes a 'profile' argument, the first by default (default: default)")  # fmt: skip
    add_auth_options(serve)
    add_run_options(serve, ceilings=True)
    sessions = serve.add_argument_group(
        "sessions (run_python with session: true keeps /workspace between calls)",
        "Each session's files are sealed in DIR/sessions of --state-dir and outlive the server; any replica "
        "on the same DIR serves any session.",
    )
    sessions.add_argument(
        "--session-ttl",
        type=int_option(1),
        default=int(DEFAULT_SESSION_TTL_S),
        metavar="SECONDS",
        help=f"remove a session unused for this long (default {int(DEFAULT_SESSION_TTL_S)})",
    )
    sessions.add_argument(
        "--max-sessions",
        type=int_option(0),
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help=f"sessions at once; 0 turns sessions off (default {DEFAULT_MAX_SESSIONS})",
    )
    sessions.add_argument("--sessions-mb", type=int_option(1), default=DEFAULT_MAX_SESSION_BYTES // _MIB,
                          metavar="N", help="MiB all sessions may hold together "
                          f"(default {DEFAULT_MAX_SESSION_BYTES // _MIB})")  # fmt: skip
    _add_state_options(serve)
    serve.set_defaults(handler=command_serve, parser=serve)


# -- shared state (issue 16): --state-dir, --state-key-file ----------------------------------------


def _add_state_options(serve: argparse.ArgumentParser) -> None:
    state = serve.add_argument_group(
        "state (sessions, artifacts, PII vaults, approvals; share it to run several replicas)",
        "Every replica of a set is given the same --state-dir (a shared volume) and the same --state-key-file.",
    )
    state.add_argument("--state-dir", type=Path, metavar="DIR",
                       help="the directory that holds what a later request may need, on any replica "
                       f"(default {_default_state_dir()}, which moves with XDG_STATE_HOME)")  # fmt: skip
    state.add_argument("--state-key-file", type=Path, metavar="FILE",
                       help="the secret (at least 32 bytes, e.g. `openssl rand -hex 32`; mode 0600) that seals "
                       "the state; without it the state directory keeps a key of its own in DIR/state.key, "
                       "fine for one server, not for a shared volume")  # fmt: skip


def _default_state_dir() -> Path:
    """The user state dir, beside the audit log (where sessions have always lived)."""
    return server_log_path().parent


def _private_default(root: Path) -> Path:
    """The default state dir, made private if this user made it open (an older version under umask 002 did)."""
    try:
        info = root.lstat()
        if info.st_uid == os.getuid() and stat.S_ISDIR(info.st_mode) and info.st_mode & 0o022:
            root.chmod(0o700)
    except OSError:
        pass  # missing (StateDir makes it), or not ours: StateDir says what is wrong
    return root


def _state(args: argparse.Namespace) -> tuple[StateDir | None, StateKey]:
    """The state directory and the key that seals what the server hands out (`ServeOptions.state`, `.state_key`).

    Raises:
        ConfigError: the key file is unusable, or the --state-dir given cannot be used (without
            --state-dir an unusable default turns sessions and shared artifacts off, with a warning).
    """
    from wasmexec._exceptions import ConfigError
    from wasmexec._state.directory import StateDir
    from wasmexec._state.key import StateKey

    shared = StateKey.from_file(args.state_key_file) if args.state_key_file is not None else None
    root = args.state_dir if args.state_dir is not None else _private_default(_default_state_dir())
    try:
        state = StateDir(root, shared or StateKey.kept_in(root))
    except ConfigError as exc:
        if args.state_dir is not None:
            raise
        print(f"warning: sessions are off: cannot use {root}: {exc}", file=sys.stderr)
        state = None
    return state, shared or StateKey.ephemeral()


def _add_replica_options(serve: Any) -> None:
    """--drain-timeout and --replica-id: running as one of several replicas (docs/deploy.md)."""
    replicas = serve.add_argument_group("as a replica (with --http; docs/deploy.md)")
    replicas.add_argument("--drain-timeout", type=int_option(0, MAX_DRAIN_TIMEOUT_S), default=DEFAULT_DRAIN_TIMEOUT_S,
                          metavar="SECONDS", help="on SIGTERM, take no new runs and let the runs in flight finish for "
                          f"up to this long before stopping them (default {DEFAULT_DRAIN_TIMEOUT_S}; 0 stops them at "
                          "once; SIGINT always stops at once)")  # fmt: skip
    replicas.add_argument("--replica-id", type=_replica_id, metavar="ID",
                          help="this process's name in /healthz and on every audit line (default: host name and "
                          "pid, e.g. web-1-4242)")  # fmt: skip


def _replica_id(text: str) -> str:
    """An argparse type: a replica id, printable and short (it goes into every audit line)."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", text):
        raise argparse.ArgumentTypeError(f"expected letters, digits and . _ : - (at most 128), got {text!r}")
    return text


def default_replica_id() -> str:
    """The host name and the pid: unique among the replicas of one host and across hosts (pods' names)."""
    import os
    import socket

    return f"{socket.gethostname()}-{os.getpid()}"


def _profile_list(text: str) -> list[str]:
    """An argparse type: one profile name or a comma-separated list of them."""
    try:
        return [check_profile(name.strip()) for name in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _offered_profiles(args: argparse.Namespace) -> list[str]:
    """The --profile values in order, each once (default: the default profile)."""
    names = [name for names in args.profiles or [[DEFAULT_PROFILE]] for name in names]
    return list(dict.fromkeys(names))


def _loaded(args: argparse.Namespace, profile: str, fuel: bool) -> ImageRuntime[Any]:
    """The runtime of `profile`, loaded now (the first call should not wait); the science one is never built here."""
    from wasmexec._exceptions import BuildError

    runtime = runtime_from_args(args, profile)
    try:
        runtime.guest(fuel)
    except BuildError as exc:
        problem = runtime.image.unavailable(exc)
        if problem is exc:
            raise
        raise problem from exc
    return runtime


def command_serve(args: argparse.Namespace) -> int:
    from wasmexec._redact import Redactor
    from wasmexec._runctx.toolhost import NoTools
    from wasmexec._sandbox.sandbox import Sandbox
    from wasmexec._state.shared_artifacts import SharedArtifactStore
    from wasmexec._workspace.store import ArtifactStore

    allowed_hosts, allowed_origins = _allowed_names(args)
    authenticator = authenticator_from_args(args)
    if args.replica_id is None:
        args.replica_id = default_replica_id()
    limits, config, policy, audit = (
        limits_from_args(args),
        load_servers(args),
        load_policy_options(args),
        open_audit(args),
    )
    state, state_key = _state(args)
    listener = _listen(args.host, args.port) if args.http else None
    if args.http and listener is None:
        return EXIT_LISTEN
    offered = _offered_profiles(args)
    # Those never built here first: a missing science image fails the start at once, not after a default build.
    loaded = {
        name: _loaded(args, name, limits.fuel is not None) for name in sorted(offered, key=DEFAULT_PROFILE.__eq__)
    }
    runtimes = [loaded[name] for name in offered]
    skills = skills_from_args(args)
    with ExitStack() as stack:
        stack.callback(_remove_run_directories)  # last: after the sandboxes gave theirs back
        broker = stack.enter_context(opened_broker(args, config, policy, audit)) if config and config.servers else None
        # One for all profiles: resources/read finds any run's artifacts (any replica's, with a state dir).
        artifacts = SharedArtifactStore(state.artifacts, state.key) if state is not None else ArtifactStore()
        stack.callback(artifacts.close)
        sandboxes = [Sandbox(limits, runtime=runtime, tools=broker if broker is not None else NoTools(),
                             redactor=broker.redactor if broker is not None else Redactor(), audit=audit,
                             max_concurrent_runs=args.max_concurrent_runs, artifact_store=artifacts,
                             skills=skills, spares=args.spares)
                     for runtime in runtimes]  # fmt: skip
        for sandbox in sandboxes:
            stack.callback(sandbox.close)
            sandbox.prepare()  # the first spare of each profile is made now, before the first call
        server = _server(sandboxes, _serve_options(args, limits, state, state_key), broker)
        stack.callback(server.close)  # first: every run ends (audited) before anything it uses closes
        if listener is not None:
            announce(authenticator, args.allow_unauthenticated)
            _serve_http(server, listener, args, allowed_hosts, allowed_origins, authenticator)
        else:
            _serve_stdio(server)
        from wasmexec._server.shutdown import ignore_signals

        ignore_signals()  # the cleanup below is bounded; a second signal must not cut it short
    return EXIT_OK


def _server(sandbox: list[Sandbox], options: ServeOptions, broker: Broker | None) -> RunPythonServer:
    """The MCP server; without sessions (and a warning) when their directory cannot be used."""
    from dataclasses import replace

    from wasmexec._server.server import RunPythonServer

    try:
        return RunPythonServer(sandbox, options, broker)
    except OSError as exc:
        print(f"warning: sessions are off: cannot use {options.sessions_dir}: {exc.strerror or exc}", file=sys.stderr)
        return RunPythonServer(sandbox, replace(options, sessions_dir=None), broker)


def _serve_options(args: argparse.Namespace, limits: Limits, state: StateDir | None, key: StateKey) -> ServeOptions:
    from wasmexec._server.server import ServeOptions

    return ServeOptions(
        limits=limits,
        state=state,
        state_key=key,
        sessions_dir=state.sessions if state is not None and args.max_sessions > 0 else None,
        session_ttl_s=float(args.session_ttl),
        max_sessions=args.max_sessions,
        max_session_bytes=args.sessions_mb * _MIB,
        max_concurrent_runs=args.max_concurrent_runs,
        max_queued_runs=args.max_queued_runs,
    )


def _serve_stdio(server: RunPythonServer) -> None:
    import anyio

    from wasmexec._server.shutdown import STOP_GRACE_S, serve_until_signalled
    from wasmexec._server.stdio import serve_stdio

    anyio.run(serve_until_signalled, lambda: serve_stdio(server), lambda: server.runs.stop_all(STOP_GRACE_S))


def _remove_run_directories() -> None:
    """Removes the process's run directories (the atexit hook would too, but not while a reaper still works)."""
    from wasmexec._workspace.rundir_pool import default_pool

    default_pool().remove()


def _listen(host: str, port: int) -> socket.socket | None:
    """A listening socket on host:port, or None after a one-line error on stderr."""
    try:
        return _bound(host, port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(f"wasmexec: error: cannot listen on {host}:{port}: {reason[:1].lower()}{reason[1:]}", file=sys.stderr)
        return None


def _bound(host: str, port: int) -> socket.socket:
    import socket

    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait for TIME_WAIT
        listener.bind(address)
        listener.listen(LISTEN_BACKLOG)
    except BaseException:
        listener.close()
        raise
    return listener


def _allowed_names(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The --allowed-host and --allowed-origin values, checked: a name, not a URL; an origin, not a page."""
    import re

    hosts, origins = list(args.allowed_host), list(args.allowed_origin)
    if (hosts or origins) and not args.http:
        raise UsageError("--allowed-host and --allowed-origin apply to --http only")
    for host in hosts:
        if not re.fullmatch(r"(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?", host):
            raise UsageError(f"--allowed-host {host!r}: expected a host name with an optional port, "
                             "e.g. mcp.example.com or mcp.example.com:8443 (no scheme, no path)")  # fmt: skip
    for origin in origins:
        if not re.fullmatch(r"https?://[^/\s?#]+", origin):
            raise UsageError(f"--allowed-origin {origin!r}: expected scheme://host[:port], "
                             "e.g. https://app.example.com (no path)")  # fmt: skip
    return hosts, origins


def _serve_http(
    server: RunPythonServer,
    listener: socket.socket,
    args: argparse.Namespace,
    allowed_hosts: list[str],
    allowed_origins: list[str],
    authenticator: Authenticator | None = None,
) -> None:
    import anyio
    import uvicorn

    from wasmexec._server.http_app import OperationsApp, transport_security
    from wasmexec._server.metrics import RunMetrics
    from wasmexec._server.shutdown import CLOSE_GRACE_S, STOP_GRACE_S, Drain, serve_until_signalled

    broker = server.broker
    breakers = broker.pool.breaker_states if broker is not None else None
    profiles = server.profile_states()
    images = {name: str(state["sandbox_image"]) for name, state in profiles.items()}

    def spares() -> SpareStats:  # every profile's sandbox together
        return sum((sandbox.spares.stats() for sandbox in server.sandboxes.values()), SpareStats())

    servers = broker.config.servers if broker is not None else ()
    metrics = RunMetrics(server.admission, servers, breakers, images, spares)
    server.admission.observer = metrics.observe_run
    mcp_app: ASGIApp = server.lowlevel().streamable_http_app(
        transport_security=transport_security(allowed_hosts, allowed_origins)
    )
    if authenticator is not None:  # inside OperationsApp: /healthz and /metrics need no token
        from wasmexec._server.auth import AuthGate

        mcp_app = AuthGate(mcp_app, authenticator)
    app = OperationsApp(mcp_app, server.admission, metrics, breakers, profiles, args.replica_id)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=CLOSE_GRACE_S)
    shown = f"[{args.host}]" if ":" in args.host else args.host  # an IPv6 address in a URL
    print(f"wasmexec: serving run_python at http://{shown}:{args.port}/mcp (replica {args.replica_id})",
          file=sys.stderr, flush=True)  # fmt: skip

    class Uvicorn(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # Ours (`serve_until_signalled`): uvicorn's re-raises the signal after its shutdown, which killed
            # the process by the default action before the cleanup.
            yield

    http = Uvicorn(config)

    def stop() -> None:
        http.should_exit = True

    drain = Drain(server.admission.drain, server.runs.idle, float(args.drain_timeout))
    anyio.run(serve_until_signalled, lambda: http.serve(sockets=[listener]), lambda: server.runs.stop_all(STOP_GRACE_S),
              stop, drain)  # fmt: skip
