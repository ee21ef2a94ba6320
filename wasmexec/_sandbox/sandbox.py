"""The public `Sandbox`: runs code on worker threads, several in parallel."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from wasmexec._audit import AuditLog, write_run_line
from wasmexec._envelope import RunResult, new_id
from wasmexec._limits import Limits
from wasmexec._redact import Redactor
from wasmexec._runctx.llm_ask import Sampler, Sampling
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import NoTools, ToolHost
from wasmexec._sandbox import registry
from wasmexec._sandbox.result import host_error_result
from wasmexec._sandbox.run import execute
from wasmexec._sandbox.runtime import ImageRuntime
from wasmexec._sandbox.spares import DEFAULT_SPARES, SpareKey, Spares, after_answer, running
from wasmexec._sandbox.stack import start_on_guest_stack
from wasmexec._workspace.rundir_pool import default_pool
from wasmexec._workspace.store import ArtifactStore
from wasmexec._workspace.workspace import InputValue, RunWorkspace, check_inputs

if TYPE_CHECKING:
    import anyio

    from wasmexec._runctx.journal import Journal
    from wasmexec._tools.pii import PiiVault


#: Wasm runs on worker threads without holding the GIL; more threads than cores only add memory.
DEFAULT_MAX_CONCURRENT_RUNS = 8


class RunControl:
    """Stops a `run_sync` run from another thread (e.g. when the request that wanted it is cancelled)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: RunState | None = None
        self._stopped = False

    def attach(self, state: RunState) -> None:
        with self._lock:
            self._state = state
            if self._stopped:
                state.stop("cancelled")

    @property
    def deadline(self) -> float | None:
        """The run's deadline (`time.monotonic` seconds), owned by its state; None until the run starts.

        Read it each time: the clock restarts once the guest is loaded (`RunState.started`).
        """
        with self._lock:
            return self._state.deadline if self._state is not None else None

    def stop(self) -> None:
        """Stops the run promptly (its result says `cancelled`); idempotent, safe before it starts."""
        with self._lock:
            self._stopped = True
            if self._state is not None:
                self._state.stop("cancelled")


class Sandbox:
    """Runs untrusted Python in fresh WebAssembly sandboxes.

    Every run gets a new instance: nothing survives from one run to the next.

    Example::

        async with Sandbox(Limits(timeout_ms=5_000)) as sandbox:
            result = await sandbox.run("result = sum(range(10))")
        assert result["result"]["data"] == 45

    Or without async: ``Sandbox().run_sync("1 + 1")``.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        runtime: ImageRuntime[Any] | None = None,
        cache_dir: Path | str | None = None,
        redactor: Redactor | None = None,
        tools: ToolHost[RunState] | None = None,
        max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS,
        audit: AuditLog | None = None,
        skills: str | os.PathLike[str] | None = None,
        artifact_store: ArtifactStore | None = None,
        workspaces: bool = True,
        profile: str | None = None,
        spares: int = DEFAULT_SPARES,
    ) -> None:
        """
        Args:
            limits: default limits of every run (each run may override them).
            runtime: a shared `Runtime`; by default one per process (or per `cache_dir`).
            cache_dir: where the compiled component is cached (ignored with `runtime`).
            redactor: replaces secrets in results; common key formats by default.
            tools: answers discovery and tool calls (the broker); none by default.
            max_concurrent_runs: runs executing at once; later ones queue.
            audit: records one line per run (digests, outcome, counts; never the code or data).
            skills: a directory mounted read-only at /skills in every run (its ``*.py`` import as
                ``skills.<name>``); a run may name another.
            artifact_store: keeps the artifacts of finished runs for `read_artifact`; by default a
                private one with the default retention (256 artifacts, 256 MiB, one hour, LRU).
            workspaces: False gives runs no /workspace or /tmp at all (no files in or out; cheapest).
            profile: the guest image, by its name in `wasmexec._sandbox.registry`: default, or science
                (numpy, pandas, matplotlib; built beforehand with ``wasmexec build --profile science``).
                None: the runtime's, else the default one.
            spares: the most instances made and warmed up ahead of time per kind of run, on a
                background thread (`wasmexec._sandbox.spares`; one, more while runs find none
                ready): a run that finds one ready skips
                instantiation (a trivial default-image run: about a third of the time). Each is used by
                one run and dropped, so every run still starts fresh. Each ready spare holds about
                1.5 MiB (default image) or 3 MiB (science) of memory and no CPU; 0 turns them off.
                Runs in place (`workspace=`), with another `skills` directory, or finding none ready
                use fresh instances as without spares; none is made while other runs go on.
                Hits and misses: `spares.stats()`.
        """
        self.limits = limits or Limits()
        if profile is None:
            profile = getattr(runtime, "profile", registry.DEFAULT_PROFILE)
        registry.check_profile(profile)
        if runtime is None:  # the registry imports an image's module only when its profile is asked for
            runtime = (
                registry.runtime(profile, cache_dir) if cache_dir is not None else registry.default_runtime(profile)
            )
        runtime_profile = getattr(runtime, "profile", registry.DEFAULT_PROFILE)
        if runtime_profile != profile:
            raise ValueError(f"the runtime given is of profile {runtime_profile!r}, not {profile!r}")
        self.profile = profile
        self.runtime: ImageRuntime[Any] = runtime
        self.redactor = redactor if redactor is not None else Redactor()
        self.tools: ToolHost[RunState] = tools if tools is not None else NoTools()
        self._max_concurrent_runs = max_concurrent_runs
        self._limiter: anyio.CapacityLimiter | None = None  # made by the first async run: `run_sync` needs no anyio
        self._slots = threading.BoundedSemaphore(max_concurrent_runs)  # and every run, sync too, takes a slot
        self.audit = audit
        self.skills = _existing_dir("skills", skills)
        self.artifacts = artifact_store if artifact_store is not None else ArtifactStore()
        self._owns_store = artifact_store is None
        self.workspaces = workspaces
        self.spares = Spares(runtime, spares, default_pool())
        self._running = 0  # runs started and not ended (a spare is made only when none is)
        self._running_lock = threading.Lock()
        self._closed = False

    async def __aenter__(self) -> Sandbox:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.prepare)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __enter__(self) -> Sandbox:
        self.prepare()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def prepare(self) -> None:
        """Builds, compiles or loads the guest now instead of on the first run, and starts making spares."""
        self.runtime.guest(self.limits.fuel is not None)
        if self.spares.count:
            files = self.workspaces
            self.spares.fill(SpareKey(self.limits.fuel is not None, self.limits.memory_bytes, files,
                                      self.skills if files else None))  # fmt: skip

    def close(self) -> None:
        """Refuses further runs, closes its spares and drops the artifacts it kept (unless the store was
        given). Idempotent."""
        self._closed = True
        self.spares.close()
        if self._owns_store:
            self.artifacts.close()

    async def run(
        self,
        code: str,
        limits: Limits | None = None,
        *,
        approver: Callable[[dict[str, Any]], bool] | None = None,
        progress: Callable[[str], Any] | None = None,
        on_output: Callable[[str, str], Any] | None = None,
        files: Mapping[str, InputValue] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        skills: str | os.PathLike[str] | None = None,
        sampler: Sampler | None = None,
    ) -> RunResult:
        """Runs `code` on a guest thread; a failing script is a result, never an exception.

        Cancelling the awaiting task stops the run promptly (its result is discarded).
        `files`, `workspace` and `skills` are as in `run_sync`; `sampler` answers `codemode.llm.ask`
        (see `run_sync`).
        """
        import anyio
        import anyio.lowlevel

        if self._limiter is None:  # no await since the check: one limiter per sandbox
            self._limiter = anyio.CapacityLimiter(self._max_concurrent_runs)  # async runs queue here, threadless
        state = self._new_state(limits, sampler)
        state.approver, state.progress, state.on_output = approver, progress, on_output
        files_in = self._new_workspace(state.limits, files, workspace, skills)
        ended = anyio.Event()
        token = anyio.lowlevel.current_token()
        outcome: list[RunResult | BaseException] = []

        def work() -> None:
            try:
                outcome.append(self._execute(code, state, files_in))
            except BaseException as exc:  # handed to the awaiting task, never lost in the thread
                outcome.append(exc)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
                    token.backend_class.run_sync_soon(ended.set, (), token.native_token)

        async with self._limiter:  # a run still queued here when cancelled never starts
            # Straight onto a guest thread, and the loop woken at the end: no worker thread in between
            # (each hand-off is a thread wake-up, 0.1-0.3 ms on an idle VM).
            start_on_guest_stack(work)
            try:
                await ended.wait()
            except anyio.get_cancelled_exc_class():
                state.stop("cancelled")
                with anyio.CancelScope(shield=True):
                    await ended.wait()
                raise
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def run_sync(
        self,
        code: str,
        limits: Limits | None = None,
        *,
        approver: Callable[[dict[str, Any]], bool] | None = None,
        progress: Callable[[str], Any] | None = None,
        control: RunControl | None = None,
        on_output: Callable[[str, str], Any] | None = None,
        files: Mapping[str, InputValue] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        skills: str | os.PathLike[str] | None = None,
        pii_vault: PiiVault | None = None,
        sampler: Sampler | None = None,
        journal: Journal | None = None,
    ) -> RunResult:
        """Runs `code` on the calling thread and returns the run result.

        `approver` is asked (blocking) before calls that need approval; without one they are denied.
        `progress` hears about each tool call; `control` lets another thread stop the run.
        `on_output` hears each piece of printed output, ``(level, text)``, as it is captured (within
        the output caps, unredacted; on the run thread: keep it quick and hand the text elsewhere).
        `sampler` answers `codemode.llm.ask`: called (blocking, on a thread of its own) with
        ``{"prompt", "system", "max_tokens"}``, secrets redacted, it returns the answer's text or
        ``{"text", "tokens"?, "model"?}``; without one, ``llm.ask`` raises SamplingUnavailableError.
        `pii_vault` carries PII tokens over from earlier runs (a session's); by default the tool
        host makes a fresh one per run (see `wasmexec._tools.pii`). `journal` records the run's
        calls and `llm.ask` answers (it wraps `sampler`), or answers them from an earlier run's log
        (the server's pauses by replay, `wasmexec._runctx.journal`).

        Files: the code runs in ``/workspace`` (its working directory; ``/tmp`` is there too), by
        default a fresh private directory removed after the run. `files` copies inputs in first:
        ``{"data.csv": b"..." | "text" | Path("local.csv")}`` (paths relative to /workspace). With
        `workspace` the run uses that host directory in place instead, and what the code writes
        there stays (nothing is rolled back when the run fails). `skills` mounts a directory
        read-only at ``/skills`` (default: the sandbox's). Inputs count towards the workspace
        limits: inputs over them fail the run with ``SandboxLimitError`` before the code starts.
        Every file created or changed in /workspace is listed in the result's ``artifacts``;
        read one with `read_artifact`.

        Raises:
            ValueError: a `files` path is not relative (absolute, ``..``, empty parts), a file to
                copy is missing, `workspace` or `skills` is not a directory, or (in place) an input
                cannot be written because a symlink or file the code left is in the way.
            TypeError: `files` is not a mapping of str to bytes, str or a path.

        Ctrl-C: on the main thread, while SIGINT has Python's default handler, a SIGINT
        stops the run (its result says ``cancelled`` and is audited), then `run_sync`
        raises KeyboardInterrupt. A KeyboardInterrupt raised where the signal lands,
        inside wasmtime's callbacks, would crash the process, so the default handler is
        swapped for one that stops the run, and restored afterwards. Any other handler
        is left alone (it can stop the run with a `RunControl`).

        Raises:
            KeyboardInterrupt: SIGINT arrived during the run, which stopped cleanly.
        """
        if journal is not None and sampler is not None:  # answers logged, and answered from the log in a replay
            sampler = journal.sampler(sampler)
        state = self._new_state(limits, sampler)
        state.approver, state.progress, state.on_output = approver, progress, on_output
        state.pii_vault = pii_vault
        if journal is not None:
            state.journal = journal
            journal.origin = journal.origin or state.run_id
        files_in = self._new_workspace(state.limits, files, workspace, skills)
        if control is not None:
            control.attach(state)
        with _sigint_stops(state) as interrupted:
            if journal is not None:
                journal.guest_busy(True)
            try:
                result = self._execute(code, state, files_in)
            finally:
                if journal is not None:  # nothing more will start: a pause need not wait for the guest
                    journal.guest_busy(False)
        if interrupted.is_set():
            raise KeyboardInterrupt
        return result

    def _new_state(self, limits: Limits | None, sampler: Sampler | None = None) -> RunState:
        if self._closed:
            raise RuntimeError("this Sandbox is closed")
        if not isinstance(limits, (Limits, type(None))):
            raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
        return RunState(
            limits=limits or self.limits,
            tools=self.tools,
            run_id=new_id(),
            sampling=Sampling(sampler, self.redactor, self.audit),
        )

    def _new_workspace(
        self,
        limits: Limits,
        files: Mapping[str, InputValue] | None,
        workspace: str | os.PathLike[str] | None,
        skills: str | os.PathLike[str] | None,
    ) -> RunWorkspace | None:
        """The run's workspace, its arguments checked now (before the run takes a slot)."""
        inputs = check_inputs(files)
        directory = _existing_dir("workspace", workspace)
        skills_dir = _existing_dir("skills", skills) or self.skills
        if not self.workspaces:
            if inputs.files or directory is not None or skills_dir is not None:
                raise ValueError("this Sandbox gives runs no workspace (workspaces=False): files, workspace and "
                                 "skills cannot be used")  # fmt: skip
            return None
        return RunWorkspace(limits, default_pool(), inputs, directory=directory, skills=skills_dir)

    def read_artifact(self, run: RunResult | str, path: str) -> bytes:
        """The bytes of an artifact of a finished run (by its result or run_id), while retention keeps them.

        Raises:
            KeyError: the run or path is unknown, or its artifacts were evicted.
        """
        return self.artifacts.read(_run_id(run), path)

    def artifact_path(self, run: RunResult | str, path: str) -> Path:
        """Where an artifact's bytes are on the host (a private file of the store: read it, do not keep the path).

        Raises:
            KeyError: as `read_artifact`.
        """
        return self.artifacts.file_path(_run_id(run), path)

    def _execute(self, code: str, state: RunState, workspace: RunWorkspace | None = None) -> RunResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        result: RunResult | None = None
        redactions = 0
        spare_key = self._spare_key(state.limits, workspace)
        with self._running_lock:
            self._running += 1  # runs started and not yet ended, queued for a slot included
        try:
            with self._slots, running():  # counted while it holds a slot: `spares` weighs that against the cores
                try:
                    spare = self.spares.take(spare_key, self._others_running()) if spare_key is not None else None
                    result, redactions = execute(self.runtime, code, state.limits, self.tools, self.redactor, state,
                                                 workspace, spare)  # fmt: skip
                    if workspace is not None and result["artifacts"]:
                        self.artifacts.put(state.run_id, workspace.root_fd, result["artifacts"],
                                           move=workspace.in_place is None)  # fmt: skip
                finally:
                    if workspace is not None:  # its directory's removal must not compete with sending the answer
                        after_answer(workspace.release)
        except BaseException as exc:  # the run raised (an interrupt, a guest that cannot load): audit it anyway
            result = host_error_result(state, exc)
            raise
        finally:
            if self.audit is not None and result is not None:
                write_run_line(self.audit, result, redactions, state.principal)
            with self._running_lock:
                self._running -= 1
                busy = self._running > 0
            if spare_key is not None:  # the last run to end orders what runs that overlapped it did not
                self.spares.refill(spare_key, busy)
        if state.interruption is not None:
            # A KeyboardInterrupt a handler of yours raised inside a wasmtime callback was caught there (it
            # must not cross into wasmtime) and stopped the run as cancelled; it is raised now, audited.
            raise state.interruption
        return result

    def _others_running(self) -> bool:
        with self._running_lock:
            return self._running > 1

    def _spare_key(self, limits: Limits, workspace: RunWorkspace | None) -> SpareKey | None:
        """The kind of spare a run can use; None when it cannot use one (spares off, a workspace in
        place, skills other than the sandbox's): such runs make their own instance."""
        if not self.spares.count:
            return None
        if workspace is None:
            return SpareKey(limits.fuel is not None, limits.memory_bytes, False)
        if workspace.in_place is not None or workspace.skills != self.skills:
            return None
        return SpareKey(limits.fuel is not None, limits.memory_bytes, True, self.skills)


def _run_id(run: RunResult | str) -> str:
    if isinstance(run, str):
        return run
    if isinstance(run, Mapping) and isinstance(run.get("run_id"), str):
        return str(run["run_id"])
    raise TypeError(f"expected a run result or a run_id, not {type(run).__name__}")


def _existing_dir(what: str, path: str | os.PathLike[str] | None) -> Path | None:
    """`path` as a Path, checked to be a directory now (ValueError otherwise); None stays None."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path, not {type(path).__name__}")
    directory = Path(path)
    if not directory.is_dir():
        raise ValueError(f"{what}: {str(directory)!r} is not a directory")
    return directory


@contextmanager
def _sigint_stops(state: RunState) -> Iterator[threading.Event]:
    """While the run lasts, SIGINT stops it instead of raising KeyboardInterrupt (see `run_sync`)."""
    interrupted = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        interrupted.set()
        state.stop("cancelled")

    previous = _replace_default_sigint_handler(stop)
    try:
        yield interrupted
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _replace_default_sigint_handler(handler: Callable[[int, FrameType | None], None]) -> Any:
    """Installs `handler` if SIGINT has Python's default handler; returns that handler, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None  # signals reach only the main thread
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return None  # someone else handles Ctrl-C (the CLI stops its run through a RunControl)
        return signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main interpreter: signals are not ours to handle
        return None
