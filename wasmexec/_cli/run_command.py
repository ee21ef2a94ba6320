"""`wasmexec run`: its parser, one run through `Sandbox`, one JSON line on stdout, Ctrl-C that stops the run.

Ctrl-C must never raise inside the run: wasm calls back into Python (host functions,
the epoch deadline check, output capture), and a KeyboardInterrupt raised in such a
callback crashed the process. So for the length of the run SIGINT only asks the run
to stop (`RunControl.stop`), from a watcher thread (see `_ctrl_c_stops`); the run ends
as `cancelled` within an epoch check, its result line is printed and the exit status
is 130. A second Ctrl-C ends the process at once (exit 130), without a result line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from wasmexec._cli.options import (
    ENVIRONMENT_HELP,
    EXIT_CODE_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    add_profile_option,
    add_run_options,
    limits_from_args,
    load_policy_options,
    load_servers,
    open_audit,
    opened_broker,
    runtime_from_args,
    skills_from_args,
)
from wasmexec._cli.startup_gc import started

if TYPE_CHECKING:
    from wasmexec._envelope import RunResult
    from wasmexec._redact import Redactor
    from wasmexec._runctx.runstate import RunState
    from wasmexec._sandbox.sandbox import RunControl, Sandbox


def add_run_parser(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run Python code and print one JSON result line",
        description="Run Python code in a fresh sandbox; print the run result as one JSON line. "
        "Ctrl-C stops the run, prints its (cancelled) result and exits 130; a second Ctrl-C exits at once.",
        epilog=ENVIRONMENT_HELP,
    )
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("file", nargs="?", metavar="FILE", help="a Python file, or - for standard input")
    source.add_argument("-c", dest="code", metavar="CODE", help="the code to run")
    run.add_argument("--stream", action="store_true", help="also print output to stderr as it comes")
    add_run_options(run, ceilings=False)
    add_profile_option(run)
    run.set_defaults(handler=command_run, parser=run)


def command_run(args: argparse.Namespace) -> int:
    from wasmexec._redact import Redactor
    from wasmexec._runctx.toolhost import NoTools, ToolHost
    from wasmexec._sandbox.sandbox import RunControl, Sandbox
    from wasmexec._workspace.rundir_pool import default_pool

    code, limits = _read_code(args), limits_from_args(args)
    inputs, skills, workspace = _input_files(args.inputs), skills_from_args(args), _workspace_dir(args.workspace)
    _check_output_dir(args.output_dir)  # before the run: its artifacts must not be lost after it
    config, policy, audit = load_servers(args), load_policy_options(args), open_audit(args)
    with ExitStack() as stack:
        tools: ToolHost[RunState] = NoTools()
        redactor = Redactor()
        if config is not None and config.servers:
            broker = stack.enter_context(opened_broker(args, config, policy, audit))
            tools, redactor = broker, broker.redactor
        # One run per process: a spare (instance or run directory) made after it would never be used.
        default_pool().keep(0)
        sandbox = Sandbox(limits, runtime=runtime_from_args(args), tools=tools, redactor=redactor, audit=audit,
                          skills=skills, profile=args.profile, spares=0)  # fmt: skip
        sandbox.prepare()  # a build or load is not the run: Ctrl-C there just exits
        started()  # the process is set up: the garbage collector back on for the run (wasmexec._cli.startup_gc)
        control = RunControl()
        try:
            with _ctrl_c_stops(control) as interrupted, _streamed(args.stream, redactor) as on_output:
                result = sandbox.run_sync(code, control=control, on_output=on_output, files=inputs,
                                          workspace=workspace)  # fmt: skip
        except (ValueError, TypeError) as exc:
            raise UsageError(str(exc)) from None
        sys.stdout.write(result_line(result) + "\n")
        sys.stdout.flush()  # now, not after the servers have been stopped
        if args.output_dir is not None:
            _write_artifacts(sandbox, result, args.output_dir)
    if interrupted.is_set():
        return EXIT_INTERRUPTED
    return EXIT_OK if result["result"]["ok"] else EXIT_CODE_FAILED


def _input_files(specs: list[str]) -> dict[str, Path]:
    """``--file LOCAL[:PATH]`` options as the `files` of a run (a whole spec naming a file is LOCAL)."""
    files: dict[str, Path] = {}
    for spec in specs:
        local, _, path = spec.rpartition(":")
        if Path(spec).is_file() or not local:
            local, path = spec, Path(spec).name
        if not Path(local).is_file():
            raise UsageError(f"--file {spec}: {local} is not a readable file")
        if path in files:
            raise UsageError(f"--file {spec}: {path} is given twice")
        files[path] = Path(local)
    return files


def _workspace_dir(directory: Path | None) -> Path | None:
    if directory is not None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--workspace {directory}: {exc.strerror or exc}") from None
    return directory


def _check_output_dir(directory: Path | None) -> None:
    """Makes --output-dir if missing and checks that files can be written there."""
    if directory is None:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output-dir {directory}: cannot create it: {exc.strerror or exc}") from None
    if not directory.is_dir():
        raise UsageError(f"--output-dir {directory}: not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"--output-dir {directory}: not writable by this user")


def _write_artifacts(sandbox: Sandbox, result: RunResult, directory: Path) -> None:
    """Writes the run's artifacts below `directory`; what cannot be written is a warning on stderr."""
    from wasmexec._workspace.export import export_artifacts

    try:
        problems = export_artifacts(sandbox.artifacts, result["run_id"], result["artifacts"], directory)
    except OSError as exc:
        problems = [f"--output-dir {directory}: {exc.strerror or exc}"]
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)


def result_line(result: RunResult) -> str:
    """The run result as the one JSON line `wasmexec run` prints (strict JSON, line separators escaped)."""
    from wasmexec._envelope import result_json

    return result_json(result)


@contextmanager
def _ctrl_c_stops(control: RunControl) -> Iterator[threading.Event]:
    """While inside, the first SIGINT stops the run and the second ends the process; yields "was interrupted".

    The kernel may deliver SIGINT to any thread (wasmtime's, the broker's), and Python runs its
    handler on the main thread only when that thread next runs Python code, which a run blocked
    in a host wait may not do for a long time. So the handler here does nothing: the signal is
    seen through the wakeup fd, which Python's C-level handler writes from whichever thread got it,
    by a watcher thread that stops the run at once (and on a second Ctrl-C ends the process).
    """
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield interrupted
        return
    reader, writer = os.pipe()  # a pipe, not a socket pair: importing socket costs every start 5 ms
    os.set_blocking(writer, False)  # set_wakeup_fd requires it: a signal handler must never block

    def watch() -> None:
        while data := os.read(reader, 64):
            if signal.SIGINT not in data:
                continue
            if interrupted.is_set():
                os._exit(EXIT_INTERRUPTED)  # the second Ctrl-C: now, without a result line
            interrupted.set()
            control.stop()

    watcher = threading.Thread(target=watch, name="wasmexec-ctrl-c", daemon=True)
    watcher.start()
    previous_fd = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    previous = signal.signal(signal.SIGINT, _ignore)  # instead of KeyboardInterrupt inside a wasm callback
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(previous_fd)
        os.close(writer)  # the watcher reads end-of-file and returns
        watcher.join()
        os.close(reader)


@contextmanager
def _streamed(stream: bool, redactor: Redactor) -> Iterator[Callable[[str, str], None] | None]:
    """With --stream, output goes to stderr (redacted, rate-bounded) as it comes; yields the capture's callback."""
    if not stream:
        yield None
        return
    from wasmexec._server.streaming import OutputStream, printed

    output = OutputStream(redactor)
    with printed(output):
        yield output.feed


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python-level SIGINT handler during a run: the wakeup-fd watcher does the work."""


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
