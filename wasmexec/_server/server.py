"""`wasmexec serve`: an MCP server with one tool, `run_python`, over stdio or streamable HTTP.

Each call runs in a fresh sandbox on a worker thread (several in parallel; the server
stays responsive). A failing script is a normal result; only bad arguments are
protocol errors. The run result is the tool's structuredContent, and a compact
rendering of it the text content. Calls that need approval are asked of the user
through MCP elicitation by the client that sent `run_python`; cancelling the request
stops the run and its downstream calls; progress is reported when asked for.

The operator's limits are ceilings: the tool's input schema states them as each
limit's default and maximum, and the arguments are checked against that schema (the
one definition of what a call may send), so a call can lower a limit, never raise it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
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
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)

from wasmexec._envelope import TOOL_NAME, RunResult, run_result_json_schema
from wasmexec._limits import Limits
from wasmexec._sandbox.sandbox import DEFAULT_MAX_CONCURRENT_RUNS, Sandbox
from wasmexec._server import sampling
from wasmexec._server.admission import DEFAULT_MAX_QUEUED_RUNS, Admission, busy_result
from wasmexec._server.description import description, input_schema
from wasmexec._server.runs import Approval, Done, PausedRuns, ServerRun
from wasmexec._server.streaming import LogLevels, sender, streamed
from wasmexec._toolhost import internal_error
from wasmexec._tools.broker import Broker
from wasmexec._tools.validation import schema_errors
from wasmexec._version import __version__

#: The text content is for a model's context: long data and logs are cut (structuredContent is whole).
MAX_TEXT_DATA = 8_000
MAX_TEXT_LOGS = 2_000
#: How long connecting the servers a call names may take before the run starts without them.
CONNECT_TIMEOUT_S = 30.0
#: The arguments that are limits, by name: a call may lower each, up to the operator's value.
LIMIT_ARGUMENTS = ("timeout_ms", "memory_mb", "max_tool_calls", "max_llm_calls", "max_llm_tokens")

Context = ServerRequestContext[Any, Any]


@dataclass(frozen=True)
class ServeOptions:
    """How `wasmexec serve` runs code."""

    limits: Limits = field(default_factory=Limits)
    """The operator's limits: the default of every call, and the most a call may ask for."""
    max_concurrent_runs: int = DEFAULT_MAX_CONCURRENT_RUNS
    """Runs executing at once (`wasmexec._server.admission`)."""
    max_queued_runs: int = DEFAULT_MAX_QUEUED_RUNS
    """Runs waiting for a slot; further calls are refused as retryable (HTTP: 503)."""


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
    if result["logs"]:
        logs = "\n".join(f"{entry['level']}: {entry['message']}" for entry in result["logs"])
        parts.append("Logs:\n" + (logs if len(logs) <= MAX_TEXT_LOGS else logs[:MAX_TEXT_LOGS] + "…"))
    return "\n".join(parts)


class RunPythonServer:
    """The MCP server. Owns nothing but borrows a Sandbox (and through it, the broker)."""

    def __init__(self, sandbox: Sandbox, options: ServeOptions | None = None, broker: Broker | None = None) -> None:
        self.sandbox = sandbox
        self.options = options or ServeOptions()
        self.broker = broker
        self.input_schema = input_schema(self.options.limits)
        self.tool = Tool(
            name=TOOL_NAME,
            description=description(self.options.limits),
            input_schema=self.input_schema,
            output_schema=run_result_json_schema(),
            annotations=ToolAnnotations(title="Run Python in a sandbox", open_world_hint=True),
        )
        self._paused = PausedRuns()
        self.admission = Admission(self.options.max_concurrent_runs, self.options.max_queued_runs)
        self.log_levels = LogLevels()

    def lowlevel(self) -> Server[Any]:
        """The mcp lowlevel Server with this tool."""
        server: Server[Any] = Server(
            "wasmexec",
            version=__version__,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            get_tool_input_schema=lambda name: self.input_schema if name == TOOL_NAME else None,
            instructions="Use run_python to run Python that discovers and calls the configured tools.",
        )
        self.log_levels.install(server)  # streamed output as log notifications (`wasmexec._server.streaming`)
        return server

    async def list_tools(self, ctx: Context, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=[self.tool])

    async def call_tool(self, ctx: Context, params: CallToolRequestParams) -> CallToolResult | InputRequiredResult:
        if params.name != TOOL_NAME:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name!r}; this server has only {TOOL_NAME!r}")
        if params.request_state:
            run = self._paused.resume(params.request_state, _session_key(ctx))
            if run is None:
                raise MCPError(INVALID_PARAMS, "run_python: unknown or expired request_state; call run_python again")
            responses = params.input_responses or {}
            if isinstance(run.pending, list):
                sampling.answer_all(run.pending, responses)
            else:
                run.answer(_approved(responses))
            return await self._drive(ctx, run)
        code, limits, servers = self.arguments(params.arguments or {})
        can_ask = ctx.session.check_client_capability(ClientCapabilities(elicitation=ElicitationCapability()))
        warnings = await self._connect(servers)
        ticket = self.admission.admit()
        if ticket is None:
            return busy_result(self.admission)
        run = ServerRun(self.sandbox, code, limits, session_key=_session_key(ctx), warnings=warnings,
                        can_ask=can_ask, can_sample=sampling.client_can_sample(ctx), ticket=ticket)  # fmt: skip
        await ctx.session.report_progress(0, None, "running")
        run.start()
        return await self._drive(ctx, run)

    def arguments(self, arguments: dict[str, Any]) -> tuple[str, Limits, list[str]]:
        """The code, limits and servers of a call, checked against the input schema (-32602 when they do not fit)."""
        errors = schema_errors(self.input_schema, arguments)
        if errors:
            raise MCPError(INVALID_PARAMS, self._explain(errors[0], arguments))
        # JSON Schema counts 2.0 as an integer; Limits wants an int.
        changes = {name: int(arguments[name]) for name in LIMIT_ARGUMENTS if name in arguments}
        return arguments["code"], self.options.limits.replace(**changes), list(arguments.get("servers", []))

    def _explain(self, error: dict[str, str], arguments: dict[str, Any]) -> str:
        name = error["pointer"][1:].split("/", 1)[0]
        if error["keyword"] == "maximum" and name in LIMIT_ARGUMENTS and "/" not in error["pointer"][1:]:
            ceiling = getattr(self.options.limits, name)
            return (f"run_python: {name!r} is {arguments[name]}, but this server allows at most {ceiling} "
                    "(a call may lower the server's limits, never raise them)")  # fmt: skip
        if not name or error["keyword"] in ("required", "additionalProperties"):
            return f"run_python: {error['message']}"
        return f"run_python: {name!r}: expected {error['expected']}, received {error['received']}"

    async def _drive(self, ctx: Context, run: ServerRun) -> CallToolResult | InputRequiredResult:
        """Drives the run to its end, or to a question the client must answer by retrying (2026 era)."""
        async with anyio.from_thread.BlockingPortal() as portal:

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
        if isinstance(outcome.result, BaseException):  # the sandbox could not run the code at all
            raise MCPError(INTERNAL_ERROR, internal_error(outcome.result).message)
        await ctx.session.report_progress(1, 1, "done")
        return self._tool_result(outcome.result, run.warnings)

    async def _until_done(
        self, ctx: Context, run: ServerRun, report: Callable[[str], None]
    ) -> Done | InputRequiredResult:
        """Waits for the run's events; asks for approvals and samples the way the client's era allows."""
        async with anyio.create_task_group() as asking:  # 2025 era: sampling requests go out in parallel
            event = await anyio.to_thread.run_sync(run.drive, report, abandon_on_cancel=True)
            while not isinstance(event, Done):
                if ctx.protocol_version.startswith("2026"):
                    return self._input_required(run, event)
                if isinstance(event, sampling.Sample):
                    asking.start_soon(sampling.ask_and_answer, ctx, event, run.remaining())
                else:
                    run.answer(await self._elicit(ctx, event.request))
                event = await anyio.to_thread.run_sync(run.drive, report, abandon_on_cancel=True)
            asking.cancel_scope.cancel()  # the run is over: questions still out are moot
        assert isinstance(event, Done)  # the task group never swallows an exception
        return event

    def _tool_result(self, result: RunResult, warnings: list[str]) -> CallToolResult:
        result["diagnostics"].extend(
            {"severity": "warning", "code": "TOOLS_UNAVAILABLE", "message": warning,
             "hint": "The server was unavailable before the run; calls to it may fail."} for warning in warnings
        )  # fmt: skip
        return CallToolResult(content=[TextContent(type="text", text=render_text(result))],
                              structured_content=dict(result))  # fmt: skip

    def _input_required(self, run: ServerRun, event: Approval | sampling.Sample) -> InputRequiredResult:
        """The 2026-era way to ask: pause the run and let the client retry with the answer."""
        if isinstance(event, sampling.Sample):
            run.pending = samples = [event, *run.queued_samples()]
            requests = sampling.input_requests(samples)
            return InputRequiredResult(input_requests=requests, request_state=self._paused.pause(run))
        run.pending = event
        question = ElicitRequest(params=ElicitRequestFormParams(message=_question(event.request),
                                                                requested_schema=APPROVAL_SCHEMA))  # fmt: skip
        return InputRequiredResult(input_requests={"approval": question}, request_state=self._paused.pause(run))

    async def _connect(self, servers: list[str]) -> list[str]:
        """Connects the servers the code says it will use; returns a warning per one unavailable."""
        if not servers:
            return []
        broker = self.broker
        if broker is None:
            return [f"server {s!r} is not configured (no MCP servers are)" for s in servers]
        known = [s for s in servers if s in broker.config.servers]
        warnings = [f"server {s!r} is not configured" for s in servers if s not in known]
        problems: dict[str, str] = {}
        await anyio.to_thread.run_sync(lambda: broker.fetch_listings(known, CONNECT_TIMEOUT_S, [], problems))
        return warnings + list(problems.values())

    async def _elicit(self, ctx: Context, request: dict[str, Any]) -> bool:
        try:
            answer = await ctx.session.elicit_form(
                _question(request), APPROVAL_SCHEMA, related_request_id=ctx.request_id
            )
        except Exception:
            return False
        return _approved({"approval": answer})


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


def _session_key(ctx: Context) -> int:
    """Binds a paused run to the HTTP session that started it, where there is one.

    Only 2025-era streamable HTTP has sessions (the `Mcp-Session-Id` header); a stdio server
    has one client, and the 2026-07-28 era has no sessions: there the unguessable resume
    token alone is the capability.
    """
    headers = getattr(ctx.request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    return hash(session or "")
