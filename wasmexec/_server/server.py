"""`wasmexec serve`: an MCP server with one tool, `run_python`, over stdio or streamable HTTP.

Each call runs in a fresh sandbox on a worker thread (several in parallel; the server
stays responsive). A failing script is a normal result; only bad arguments are
protocol errors. The run result is the tool's structuredContent, and a compact
rendering of it the text content. Calls that need approval are asked of the user
through MCP elicitation by the client that sent `run_python`; cancelling the request
stops the run and its downstream calls; progress is reported when asked for.

Files: `files` are copied into the run's /workspace; what the code writes there comes
back as artifacts, each an MCP resource (`resources.py`) linked from the result, small
images and text also inline. `session: true` keeps the workspace for later calls with
the returned `session_id` (`wasmexec._state.sessions`). Artifacts, sessions and
paused runs belong to the caller that made them (`callers.py`).

Profiles: the server may offer more than one guest image (a Sandbox each, sharing the
tools, redactor, audit and artifact store); then `profile` picks one per call, the first
by default. A session is files only, so it is not bound to a profile: each call runs in
the profile it names, and a profile without /workspace refuses `files` and sessions.

The operator's limits are ceilings: the tool's input schema states them as each
limit's default and maximum, and the arguments are checked against that schema (the
one definition of what a call may send), so a call can lower a limit, never raise it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ClientCapabilities,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    ListResourcesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    TextContent,
    Tool,
    ToolAnnotations,
)

from wasmexec._envelope import TOOL_NAME, RunResult, inlined_json_schema, new_id, run_result_json_schema
from wasmexec._limits import Limits
from wasmexec._profiles import Profile, profile_of
from wasmexec._runctx.journal import Journal
from wasmexec._runctx.toolhost import internal_error
from wasmexec._sandbox.result import notice_result
from wasmexec._sandbox.sandbox import DEFAULT_MAX_CONCURRENT_RUNS, Sandbox
from wasmexec._server import replay, sampling
from wasmexec._server.admission import DEFAULT_MAX_QUEUED_RUNS, Admission, busy_result
from wasmexec._server.callers import caller_key
from wasmexec._server.description import description, input_schema
from wasmexec._server.inputs import FilesError, decode_files
from wasmexec._server.resources import ArtifactResources
from wasmexec._server.runs import Approval, Asked, Done, Job, LiveRuns, ServerRun, SessionRun, session_ended
from wasmexec._server.shutdown import STOP_GRACE_S
from wasmexec._server.streaming import LogLevels, sender, streamed, wants_progress
from wasmexec._state.approvals import ApprovalStore, InUse, Recorded, Refused
from wasmexec._state.directory import StateDir
from wasmexec._state.key import StateKey
from wasmexec._state.sessions import (
    DEFAULT_MAX_SESSION_BYTES,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_TTL_S,
    DamagedSession,
    Session,
    SessionError,
    SessionStore,
    UnknownSession,
)
from wasmexec._tools.broker import Broker
from wasmexec._tools.mcp_errors import ServerUnavailable
from wasmexec._tools.pii import PiiVault
from wasmexec._tools.validation import schema_checker
from wasmexec._version import __version__
from wasmexec._workspace.workspace import InputError

#: The text content is for a model's context: long data and logs are cut (structuredContent is whole).
MAX_TEXT_DATA = 8_000
MAX_TEXT_LOGS = 2_000
#: How long connecting the servers a call names may take before the run starts without them.
CONNECT_TIMEOUT_S = 30.0
#: The arguments that are limits, by name: a call may lower each, up to the operator's value.
LIMIT_ARGUMENTS = ("timeout_ms", "memory_mb", "max_tool_calls", "max_llm_calls", "max_llm_tokens")

Context = ServerRequestContext[Any, Any]
#: The capability a client needs for approvals by elicitation (made once: a model built per call costs 5 µs).
_ELICITATION = ClientCapabilities(elicitation=ElicitationCapability())


@dataclass(frozen=True)
class ServeOptions:
    """How `wasmexec serve` runs code."""

    limits: Limits = field(default_factory=Limits)
    """The operator's limits: the default of every call, and the most a call may ask for."""
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    """Runs executing at once (`wasmexec._server.admission`)."""
    max_queued_runs: int = DEFAULT_MAX_QUEUED_RUNS
    """Runs waiting for a slot; further calls are refused as retryable (HTTP: 503)."""
    sessions_dir: Path | None = None
    """Where sessions keep their files (one directory each); None turns sessions off."""
    session_ttl_s: float = DEFAULT_SESSION_TTL_S
    """A session unused for this long is removed."""
    max_sessions: int = DEFAULT_MAX_SESSIONS
    """Sessions at once."""
    max_session_bytes: int = DEFAULT_MAX_SESSION_BYTES
    """Bytes of all sessions together."""
    state: StateDir | None = None
    """Where state that a later request (or another replica) needs is kept (`wasmexec._state.directory`)."""
    state_key: StateKey = field(default_factory=StateKey.ephemeral)
    """Seals what the server hands out or keeps (`--state-key-file`; else a key of this process only)."""


def render_text(result: RunResult) -> str:
    """A compact rendering for models: data first, then the error with hints, then logs."""
    outcome = result["result"]
    parts = []
    if outcome["ok"]:
        data = json.dumps(outcome["data"], ensure_ascii=False)
        parts.append(data if len(data) <= MAX_TEXT_DATA else data[:MAX_TEXT_DATA] + f"… [{len(data)} chars; "
                     "the whole result is in structuredContent]")  # fmt: skip
    else:
        error = outcome["error"]
        parts.append(f"Error: {error['type']}: {error['message']}")
    for diagnostic in result["diagnostics"]:
        line = f" (line {diagnostic['line']})" if "line" in diagnostic else ""
        hint = f" Hint: {diagnostic['hint']}" if "hint" in diagnostic else ""
        parts.append(f"[{diagnostic['severity']}] {diagnostic['code']}{line}: {diagnostic['message']}{hint}")
    if "session_id" in result:
        parts.append(f"session_id: {result['session_id']} (pass it to run in this session's /workspace again)")
    if result["logs"]:
        logs = "\n".join(f"{entry['level']}: {entry['message']}" for entry in result["logs"])
        parts.append("Logs:\n" + (logs if len(logs) <= MAX_TEXT_LOGS else logs[:MAX_TEXT_LOGS] + "…"))
    return "\n".join(parts)


class RunPythonServer:
    """The MCP server. Owns its sessions (`close` lets go of them); borrows a Sandbox (and its broker, artifacts)."""

    def __init__(
        self, sandbox: Sandbox | Sequence[Sandbox], options: ServeOptions | None = None, broker: Broker | None = None
    ) -> None:
        """Args:
        sandbox: the Sandbox that runs calls, or one per profile offered (the first is the default).
        options: limits, load and sessions.
        broker: the tools' broker, when servers are configured (its pool's breakers are reported).
        """
        offered = [sandbox] if isinstance(sandbox, Sandbox) else list(sandbox)
        self.sandboxes: dict[str, Sandbox] = {each.profile: each for each in offered}
        if not offered or len(self.sandboxes) != len(offered):
            raise ValueError("give one Sandbox per profile offered, at least one")
        self.sandbox = offered[0]
        """The default profile's Sandbox."""
        self.profiles: list[Profile] = [profile_of(each.runtime) for each in offered]
        """What each profile offered is (its packages): the description says it."""
        self.options = options or ServeOptions()
        self.broker = broker
        self.input_schema = input_schema(self.options.limits, list(self.sandboxes))
        self._argument_errors = schema_checker(self.input_schema)  # how a call's arguments fail it
        self._code_only_fits = _code_only_check(self.input_schema)
        no_files = [name for name, each in self.sandboxes.items() if not each.workspaces]
        self.tool = Tool(
            name=TOOL_NAME,
            description=description(self.options.limits, self.profiles, no_files),
            input_schema=self.input_schema,
            output_schema=inlined_json_schema(run_result_json_schema()),  # clients check every result with it
            annotations=ToolAnnotations(title="Run Python in a sandbox", open_world_hint=True),
        )
        self.runs = LiveRuns()
        """Every run not yet ended: `close` stops them."""
        self.when_answered: Callable[[Callable[[], None]], None] = _now
        """Calls what waits for a call's answer to be out once it is: at once (the answer is built);
        the stdio transport makes it wait until the answer is written (`wasmexec._server.stdio`)."""
        self._approvals_dir: weakref.finalize[Any, Any] | None = None
        if self.options.state is not None:
            approvals_root = self.options.state.approvals
        else:  # one process, no shared store: a private directory that goes with the server
            approvals_root = Path(tempfile.mkdtemp(prefix="wasmexec-approvals-"))
            # Removed by `close`, else when the server is collected or at exit (quietly: no ResourceWarning).
            self._approvals_dir = weakref.finalize(self, shutil.rmtree, approvals_root, True)
        self.approvals = ApprovalStore(approvals_root, self.options.state_key)
        """Single-use states, approved calls' outcomes, large logs (`wasmexec._state.approvals`)."""
        self.admission = Admission(self.options.max_concurrent_runs, self.options.max_queued_runs)
        self.log_levels = LogLevels()
        self.resources = ArtifactResources(self.sandbox.artifacts)
        options = self.options
        self.sessions: SessionStore | None = None
        if options.sessions_dir is not None:
            self.sessions = SessionStore(
                options.sessions_dir,
                key=options.state.key if options.state is not None else options.state_key,
                ttl_s=options.session_ttl_s,
                max_sessions=options.max_sessions,
                max_bytes=options.max_session_bytes,
                reaper=True,
            )

    def profile_states(self) -> dict[str, dict[str, Any]]:
        """The profiles served, for ``/healthz``: each was loaded before the server started (so is ready)."""
        return {
            profile.name: {"ready": True, "sandbox_image": self.sandboxes[profile.name].runtime.sandbox_image,
                           "python": profile.python, "packages": len(profile.packages)}
            for profile in self.profiles
        }  # fmt: skip

    def close(self, grace_s: float = STOP_GRACE_S) -> bool:
        """Stops every run (paused ones too) and waits up to `grace_s` for them to end, each audited and its
        directories given back; then lets go of the sessions (their files stay for the next server on the
        directory). Idempotent. Returns False when some run had not ended in time."""
        ended = self.runs.stop_all(grace_s)
        if self.sessions is not None:
            self.sessions.close()
        if self._approvals_dir is not None:
            self._approvals_dir()
        return ended

    def lowlevel(self) -> Server[Any]:
        """The mcp lowlevel Server with this tool."""
        server: Server[Any] = Server(
            "wasmexec",
            version=__version__,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_read_resource=self.read_resource,
            get_tool_input_schema=lambda name: self.input_schema if name == TOOL_NAME else None,
            instructions="Use run_python to run Python that discovers and calls the configured tools.",
        )
        self.log_levels.install(server)  # streamed output as log notifications (`wasmexec._server.streaming`)
        # Seals every request_state the server hands out and checks every one it gets back.
        server.middleware.append(replay.boundary(self.options.state_key, self.options.limits.timeout_ms / 1000))
        return server

    async def list_tools(self, ctx: Context, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=[self.tool])

    async def list_resources(self, ctx: Context, params: PaginatedRequestParams | None) -> ListResourcesResult:
        """The caller's artifacts that retention still keeps."""
        cursor = params.cursor if params is not None else None
        return await anyio.to_thread.run_sync(self.resources.page, caller_key(ctx), cursor)

    async def read_resource(self, ctx: Context, params: ReadResourceRequestParams) -> ReadResourceResult:
        """One of the caller's artifacts (-32602 for any other URI)."""
        return await anyio.to_thread.run_sync(self.resources.read, str(params.uri), caller_key(ctx))

    async def call_tool(self, ctx: Context, params: CallToolRequestParams) -> CallToolResult | InputRequiredResult:
        if params.name != TOOL_NAME:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name!r}; this server has only {TOOL_NAME!r}")
        caller = caller_key(ctx)
        if params.request_state:
            return await self._retry(ctx, params, caller)
        job = self.arguments(params.arguments or {})
        if job.end_session and not job.code.strip():
            return await anyio.to_thread.run_sync(self._end_without_run, job, caller)
        return await self._run(ctx, job, caller)

    async def _retry(
        self, ctx: Context, params: CallToolRequestParams, caller: str | None
    ) -> CallToolResult | InputRequiredResult:
        """A 2026-era retry: its state was unsealed and checked by the boundary (`wasmexec._server.replay`)."""
        state = replay.read_state(params.request_state or "", params.arguments)
        responses = params.input_responses or {}
        try:
            claim = await anyio.to_thread.run_sync(self.approvals.claim, state["nonce"], state["deadline"])
        except (InUse, Refused, OSError) as exc:
            raise replay.invalid(f"state {type(exc).__name__}: {exc}") from None
        if isinstance(claim, Recorded):  # a second retry of a state already used: its answer, nothing runs
            return replay.recorded(claim.result)
        try:
            snapshot = replay.payload(self.approvals, state)
            try:
                answers = sampling.replies(len(snapshot.get("asked") or []), responses)
                journal = Journal.replaying(snapshot, _approved(responses), claim, answers)
            except (KeyError, TypeError, ValueError) as exc:
                raise replay.invalid(f"log: {exc}") from None
            job = self.arguments(params.arguments or {})
            answer = await self._run(ctx, job, caller, journal, snapshot.get("vault"), continuing=True)
            if isinstance(answer, InputRequiredResult) or answer.structured_content is not None:
                await anyio.to_thread.run_sync(claim.finish, replay.record(answer))
            return answer  # anything else (busy, a session in use): the state stays usable
        finally:
            claim.release()

    async def _run(
        self, ctx: Context, job: Job, caller: str | None, journal: Journal | None = None, vault: Any = None,
        *, continuing: bool = False,
    ) -> CallToolResult | InputRequiredResult:  # fmt: skip
        """Runs a job (a new call, or the replay of a paused one with its `journal` and PII `vault`).

        `continuing` (a replay): a draining server still runs it, as it finishes the runs in flight.
        """
        ticket = self.admission.admit(continuing)
        if ticket is None:
            return busy_result(self.admission)
        started = False
        try:
            try:  # on a worker thread: reserving may first remove expired sessions' files
                session = None
                if self._wants_session(job):
                    session = await anyio.to_thread.run_sync(self._session, job, caller)
            except UnknownSession as exc:
                if job.end_session:  # ending is idempotent; the code needed the session's files, so it is not run
                    return _ended_result(False)
                raise MCPError(INVALID_PARAMS, f"run_python: {exc}") from None
            except SessionError as exc:  # busy, or the server's caps: the call may work later
                return CallToolResult(content=[TextContent(type="text", text=f"Error: {exc}")], is_error=True)
            try:
                can_ask = ctx.session.check_client_capability(_ELICITATION)
                can_sample = sampling.client_can_sample(ctx)
                if journal is None and (can_ask or can_sample) and ctx.protocol_version.startswith("2026"):
                    journal = Journal()  # approvals and questions to the client's model pause by replay
                warnings = await self._connect(job.servers)
                run = ServerRun(self.sandboxes[job.profile], job, caller=caller, warnings=warnings, can_ask=can_ask,
                                session=session, can_sample=can_sample, ticket=ticket,
                                journal=journal, pii_vault=self._run_vault(session, journal, vault))  # fmt: skip
                await ctx.session.report_progress(0, None, "running")
            except BaseException:  # cancelled before the run started: the session is free again
                if session is not None:
                    session.store.finish(session.session, session.workspace, keep=False)
                raise
            self.runs.start(run)
            started = True
        finally:
            if not started:  # the run never took its place in the queue: give it back
                ticket.cancel()
        return await self._drive(ctx, run)

    def arguments(self, arguments: dict[str, Any]) -> Job:
        """What a call asks for, checked against the input schema and decoded (-32602 when it does not fit)."""
        errors = [] if self._code_only_fits(arguments) else self._argument_errors(arguments)
        if errors:
            raise MCPError(INVALID_PARAMS, self._explain(errors[0], arguments))
        # JSON Schema counts 2.0 as an integer; Limits wants an int.
        changes = {name: int(arguments[name]) for name in LIMIT_ARGUMENTS if name in arguments}
        limits = self.options.limits.replace(**changes) if changes else self.options.limits
        try:
            files = decode_files(arguments.get("files", []), limits)
        except FilesError as exc:
            raise MCPError(INVALID_PARAMS, f"run_python: {exc}") from None
        session_id = arguments.get("session_id")
        profile = str(arguments.get("profile", self.sandbox.profile))
        if (files or session_id is not None or arguments.get("session")) and not self.sandboxes[profile].workspaces:
            raise MCPError(INVALID_PARAMS, f"run_python: the {profile} profile has no /workspace on this server: "
                           "`files` and sessions need one")  # fmt: skip
        if arguments.get("end_session") and session_id is None:
            raise MCPError(INVALID_PARAMS, "run_python: 'end_session' needs the 'session_id' of the session to end")
        if session_id is not None and arguments.get("session") is False:
            raise MCPError(INVALID_PARAMS, "run_python: 'session' is false but a 'session_id' is given")
        if (session_id is not None or arguments.get("session")) and self.sessions is None:
            raise MCPError(INVALID_PARAMS, "run_python: sessions are turned off on this server")
        return Job(arguments["code"], limits, list(arguments.get("servers", [])), files,
                   new_session=arguments.get("session") is True, session_id=session_id,
                   end_session=arguments.get("end_session") is True, profile=profile)  # fmt: skip

    def _wants_session(self, job: Job) -> bool:
        """Whether the run works in a session (without one, no thread hop and no file of the state dir)."""
        return self.sessions is not None and (job.session_id is not None or job.new_session)

    def _session(self, job: Job, caller: str | None) -> SessionRun | None:
        """The session the run works in, reserved for it, its files opened into the run's copy (None: no session).

        Raises:
            SessionError: unknown, busy, over a cap, or its stored files or vault do not open.
        """
        store = self.sessions
        if store is None or not self._wants_session(job):
            return None
        session = store.acquire(job.session_id, caller) if job.session_id is not None else store.create(caller)
        try:
            vault = self._pii_vault(store, session)
            workspace = store.checkout(session)
        except BaseException as exc:
            store.finish(session, None, keep=False)
            if isinstance(exc, OSError):
                raise SessionError(f"cannot open the session's files on this server: {exc.strerror or exc}") from None
            raise
        return SessionRun(store, session, workspace, vault, end=job.end_session)

    def _pii_vault(self, store: SessionStore, session: Session) -> PiiVault | None:
        """The session's PII vault, as its last run left it (kept sealed with the session, so it ends with it)."""
        if self.broker is None or self.broker.pii == "off":
            return None
        data = store.read_extra(session, "vault")
        try:
            vault = PiiVault.from_bytes(data, self.broker.pii) if data else PiiVault(self.broker.pii)
        except ValueError:
            raise DamagedSession("this session's stored PII vault cannot be read; start a new session") from None
        session.vault = vault
        return vault

    def _run_vault(self, session: SessionRun | None, journal: Journal | None, exported: Any) -> PiiVault | None:
        """A run's PII vault: its session's; for a run that may pause by replay, one the pause can carry;
        for a replay, the paused run's tokens again (so the tokens its logged answers hold resolve)."""
        if self.broker is None or self.broker.pii == "off":
            return None
        if session is not None:
            if session.pii_vault is not None:
                session.pii_vault.merge(exported)
            return session.pii_vault
        if journal is None:
            return None  # the tool host makes one
        return PiiVault.imported(exported, self.broker.pii) if exported is not None else PiiVault(self.broker.pii)

    def _end_without_run(self, job: Job, caller: str | None) -> CallToolResult:
        """`end_session` with no code: the session ends at once (idempotent: an unknown one is no error)."""
        assert self.sessions is not None and job.session_id is not None  # checked in `arguments`
        try:
            ended = self.sessions.end(job.session_id, caller)
        except SessionError as exc:  # busy: retry when its run has returned
            return CallToolResult(content=[TextContent(type="text", text=f"Error: {exc}")], is_error=True)
        return _ended_result(ended)

    def _explain(self, error: dict[str, str], arguments: dict[str, Any]) -> str:
        name = error["pointer"][1:].split("/", 1)[0]
        offered = " and ".join(repr(profile) for profile in self.sandboxes)
        if name == "profile" or (error["keyword"] == "additionalProperties" and "'profile'" in error["message"]):
            if len(self.sandboxes) == 1:
                return f"run_python: this server offers only the {offered} profile: leave out 'profile'"
            return f"run_python: 'profile' must be one of {offered}, received {error['received']}"
        if error["keyword"] == "maximum" and name in LIMIT_ARGUMENTS and "/" not in error["pointer"][1:]:
            ceiling = getattr(self.options.limits, name)
            return (f"run_python: {name!r} is {arguments[name]}, but this server allows at most {ceiling} "
                    "(a call may lower the server's limits, never raise them)")  # fmt: skip
        if not name or error["keyword"] in ("required", "additionalProperties"):
            return f"run_python: {error['message']}"
        return f"run_python: {name!r}: expected {error['expected']}, received {error['received']}"

    async def _drive(self, ctx: Context, run: ServerRun) -> CallToolResult | InputRequiredResult:
        """Drives the run to its end, or to a question the client must answer by retrying (2026 era)."""
        try:
            return await self._answer(ctx, run)
        finally:  # what the run ordered as it ended (its Store's close, a spare) waits until the answer is out
            self.when_answered(run.hold.release)

    async def _answer(self, ctx: Context, run: ServerRun) -> CallToolResult | InputRequiredResult:
        async with AsyncExitStack() as stack:
            report: Callable[[str], None] = _no_report
            if wants_progress(ctx):  # else reporting is a no-op: no portal to open and close per call
                portal = await stack.enter_async_context(anyio.from_thread.BlockingPortal())

                def report(message: str) -> None:
                    portal.start_task_soon(ctx.session.report_progress, 0.5, None, message)

            try:
                async with streamed(run.output, sender(ctx, self.log_levels)):
                    outcome = await self._until_done(ctx, run, report)
            except anyio.get_cancelled_exc_class():
                run.control.stop()  # the client cancelled: stop the run and its downstream calls
                raise
        if isinstance(outcome, InputRequiredResult):
            return outcome
        if isinstance(outcome.result, InputError):  # an input file could not be written (a session's file in the way)
            raise MCPError(INVALID_PARAMS, f"run_python: {outcome.result}")
        if isinstance(outcome.result, BaseException):  # the sandbox could not run the code at all
            raise MCPError(INTERNAL_ERROR, internal_error(outcome.result).message)
        await ctx.session.report_progress(1, 1, "done")
        if outcome.result.get("artifacts"):  # their owner is recorded and small ones read: disk work
            return await anyio.to_thread.run_sync(self._tool_result, outcome.result, run)
        return self._tool_result(outcome.result, run)  # nothing to keep or read: no thread hop

    async def _until_done(
        self, ctx: Context, run: ServerRun, report: Callable[[str], None]
    ) -> Done | InputRequiredResult:
        """Waits for the run's events; asks for approvals and samples the way the client's era allows."""
        event = await run.next_event(report)
        if isinstance(event, Done):  # most runs ask nothing: no task group to open and cancel (two loop turns)
            return event
        async with anyio.create_task_group() as asking:  # 2025 era: sampling requests go out in parallel
            while not isinstance(event, Done):
                if isinstance(event, Approval | Asked) and event.snapshot is not None:  # 2026 era
                    answer = self._input_required(ctx, run, event)
                    # The run ends: its session and slot are free before the retry.
                    await run.wait_ended(report)
                    return answer
                if isinstance(event, sampling.Sample):
                    asking.start_soon(sampling.ask_and_answer, ctx, event, run.remaining())
                else:
                    run.answer(await self._elicit(ctx, event.request))
                event = await run.next_event(report)
            asking.cancel_scope.cancel()  # the run is over: questions still out are moot
        assert isinstance(event, Done)  # the task group never swallows an exception
        return event

    def _tool_result(self, result: RunResult, run: ServerRun) -> CallToolResult:
        """The run result as structuredContent, a rendering for models, and its artifacts (read from disk)."""
        result["diagnostics"].extend(
            {"severity": "warning", "code": "TOOLS_UNAVAILABLE", "message": warning,
             "hint": "The server was unavailable before the run; calls to it may fail."} for warning in run.warnings
        )  # fmt: skip
        if result.get("artifacts"):  # none kept: no owner to record (a stat in the state dir, on the loop)
            self.resources.keep(result["run_id"], run.caller)
        content = [TextContent(type="text", text=render_text(result)), *self.resources.content(result)]
        return CallToolResult(content=content, structured_content=dict(result))

    def _input_required(self, ctx: Context, run: ServerRun, event: Approval | Asked) -> InputRequiredResult:
        """The 2026-era way to ask: the run ends and the client retries with the answer, which any replica
        finishes by replaying the run (`wasmexec._server.replay`)."""
        assert event.snapshot is not None
        arguments = ctx.params.get("arguments") if ctx.params is not None else None
        try:
            state = replay.pause_state(self.approvals, event.snapshot, time.time() + run.remaining(), arguments)
        finally:
            run.end_paused()
        if isinstance(event, Asked):
            return InputRequiredResult(input_requests=sampling.input_requests(event.requests), request_state=state)
        question = ElicitRequest(params=ElicitRequestFormParams(message=_question(event.request),
                                                                requested_schema=APPROVAL_SCHEMA))  # fmt: skip
        return InputRequiredResult(input_requests={"approval": question}, request_state=state)

    async def _connect(self, servers: list[str]) -> list[str]:
        """Connects the servers the code says it will use; returns a warning per one unavailable."""
        if not servers:
            return []
        broker = self.broker
        if broker is None:
            return [f"server {s!r} is not configured (no MCP servers are)" for s in servers]
        known = [s for s in servers if s in broker.config.servers]
        warnings = [f"server {s!r} is not configured" for s in servers if s not in known]
        problems: dict[str, ServerUnavailable] = {}
        await anyio.to_thread.run_sync(lambda: broker.fetch_listings(known, CONNECT_TIMEOUT_S, [], problems))
        return warnings + [str(problem) for problem in problems.values()]

    async def _elicit(self, ctx: Context, request: dict[str, Any]) -> bool:
        try:
            answer = await ctx.session.elicit_form(
                _question(request), APPROVAL_SCHEMA, related_request_id=ctx.request_id
            )
        except Exception:
            return False
        return _approved({"approval": answer})


def _code_only_check(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bool]:
    """Whether arguments of only ``code`` fit `schema`, decided without the validator (most calls send only
    code: the validator took 35-70 µs of each on the event loop). Exactly the schema's answer: it applies only
    while ``code``'s schema says no more than its type and length (else every call goes to the validator)."""
    code = schema.get("properties", {}).get("code", {})
    plain = set(code) <= {"type", "description", "maxLength"} and code.get("type") == "string"
    known = {"type", "properties", "required", "additionalProperties", "description", "title", "$schema"}
    if not plain or set(schema) - known or schema.get("type") != "object" or set(schema.get("required", [])) - {"code"}:
        return lambda arguments: False
    longest = code.get("maxLength")

    def fits(arguments: dict[str, Any]) -> bool:
        value = arguments.get("code")
        return (len(arguments) == 1 and isinstance(value, str)
                and (longest is None or len(value) <= longest))  # fmt: skip

    return fits


def _now(then: Callable[[], None]) -> None:
    then()


def _no_report(message: str) -> None:
    """The run's progress when the client asked for none."""


def _ended_result(ended: bool) -> CallToolResult:
    """The answer to `end_session` when no code ran: whether this call ended the session."""
    result = notice_result(session_ended(ended), run_id=new_id(), trace_id=new_id())
    return CallToolResult(content=[TextContent(type="text", text=render_text(result))], structured_content=dict(result))


#: What the user is asked: one boolean, so every client can render it.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Allow this call", "default": True}},
    "required": ["approve"],
}


def _question(request: dict[str, Any]) -> str:
    """The broker's question, complete and with hidden characters made visible (`wasmexec._tools.approval`)."""
    return str(request["question"])


def _approved(responses: Any) -> bool:
    """Reads the user's answer (an ElicitResult, or its dict form) to the approval question."""
    answer = responses.get("approval") if isinstance(responses, dict) else None
    if answer is None:
        return False
    if not isinstance(answer, dict):
        answer = answer.model_dump(by_alias=True, exclude_none=True)
    content = answer.get("content") or {}
    return answer.get("action") == "accept" and content.get("approve", True) is True
