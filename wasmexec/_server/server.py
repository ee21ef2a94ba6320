"""`wasmexec serve`: an MCP server with one tool, `run_python`, over stdio or streamable HTTP.

Each call runs in a fresh sandbox on a worker thread (several in parallel; the server
stays responsive). A failing script is a normal result; only bad arguments are
protocol errors. The run result is the tool's structuredContent, and a compact
rendering of it the text content. Calls that need approval are asked of the user
through MCP elicitation by the client that sent `run_python`; cancelling the request
stops the run and its downstream calls; progress is reported when asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import anyio.from_thread

from wasmexec._envelope import TOOL_NAME, RunResult, run_result_json_schema
from wasmexec._limits import MAX_TIMEOUT_MS, Limits
from wasmexec._sandbox.sandbox import Sandbox
from wasmexec._server.description import DESCRIPTION, MAX_CODE_BYTES, input_schema
from wasmexec._server.runs import PausedRuns, ServerRun
from wasmexec._version import __version__

#: The text content is for a model's context: long data and logs are cut (structuredContent is whole).
MAX_TEXT_DATA = 8_000
MAX_TEXT_LOGS = 2_000
_ARGUMENTS = {"code", "timeout_ms", "memory_mb", "max_tool_calls", "servers"}


@dataclass(frozen=True)
class ServeOptions:
    """How `wasmexec serve` runs code."""

    limits: Limits = field(default_factory=Limits)
    """Default limits; a call may lower or raise them up to `max_timeout_ms`."""
    max_timeout_ms: int = 5 * 60 * 1000
    """The largest `timeout_ms` a call may ask for."""


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

    def __init__(self, sandbox: Sandbox, options: ServeOptions | None = None, broker: Any = None) -> None:
        self.sandbox = sandbox
        self.options = options or ServeOptions()
        self.broker = broker
        self.tool = self._tool()
        self._paused = PausedRuns()

    def _tool(self) -> Any:
        from mcp.types import Tool, ToolAnnotations

        return Tool(name=TOOL_NAME, description=DESCRIPTION, input_schema=input_schema(self.options.max_timeout_ms),
                    output_schema=run_result_json_schema(),
                    annotations=ToolAnnotations(title="Run Python in a sandbox", open_world_hint=True))  # fmt: skip

    def lowlevel(self) -> Any:
        """The mcp lowlevel Server with this tool."""
        from mcp.server import Server

        return Server(
            "wasmexec",
            version=__version__,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            instructions="Use run_python to run Python that discovers and calls the configured tools.",
        )

    async def list_tools(self, ctx: Any, params: Any) -> Any:
        from mcp.types import ListToolsResult

        return ListToolsResult(tools=[self.tool])

    async def call_tool(self, ctx: Any, params: Any) -> Any:
        from mcp import MCPError
        from mcp.types import INVALID_PARAMS

        if params.name != TOOL_NAME:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name!r}; this server has only {TOOL_NAME!r}")
        if getattr(params, "request_state", None):
            run = self._paused.resume(params.request_state, _session_key(ctx))
            if run is None:
                raise MCPError(INVALID_PARAMS, "run_python: unknown or expired request_state; call run_python again")
            run.answer(_approved(getattr(params, "input_responses", None) or {}))
            return await self._drive(ctx, run)
        code, limits, servers = self._arguments(params.arguments, MCPError, INVALID_PARAMS)
        can_ask, _ = self._elicitation(ctx)
        warnings = await self._connect(servers)
        run = ServerRun(self.sandbox, code, limits, session_key=_session_key(ctx), warnings=warnings,
                        can_ask=can_ask)  # fmt: skip
        await ctx.session.report_progress(0, None, "running")
        run.start()
        return await self._drive(ctx, run)

    async def _drive(self, ctx: Any, run: ServerRun) -> Any:
        """Waits for the run's next event; asks for approvals the way the client's era allows."""
        _, in_2026_era = self._elicitation(ctx)
        async with anyio.from_thread.BlockingPortal() as portal:

            def report(message: str) -> None:
                portal.start_task_soon(ctx.session.report_progress, 0.5, None, message)

            try:
                while True:
                    kind, payload = await anyio.to_thread.run_sync(run.drive, report, abandon_on_cancel=True)
                    if kind == "done":
                        break
                    if in_2026_era:
                        return self._input_required(run, payload)
                    else:
                        run.answer(await self._elicit(ctx, payload))
            except anyio.get_cancelled_exc_class():
                run.control.stop()  # the client cancelled: stop the run and its downstream calls
                raise
        if isinstance(payload, Exception):
            raise payload
        await ctx.session.report_progress(1, 1, "done")
        return self._tool_result(payload, run.warnings)

    def _tool_result(self, result: RunResult, warnings: list[str]) -> Any:
        from mcp.types import CallToolResult, TextContent

        result["diagnostics"].extend(
            {"severity": "warning", "code": "TOOLS_UNAVAILABLE", "message": warning,
             "hint": "The server was unavailable before the run; calls to it may fail."} for warning in warnings
        )  # fmt: skip
        return CallToolResult(content=[TextContent(type="text", text=render_text(result))],
                              structured_content=dict(result))  # fmt: skip

    def _input_required(self, run: ServerRun, request: dict[str, Any]) -> Any:
        """The 2026-era way to ask: pause the run and let the client retry with the answer."""
        from mcp.types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

        question = ElicitRequest(params=ElicitRequestFormParams(message=_question(request),
                                                                requested_schema=APPROVAL_SCHEMA))  # fmt: skip
        return InputRequiredResult(input_requests={"approval": question}, request_state=self._paused.pause(run))

    def _arguments(self, arguments: Any, error: Any, code_invalid: int) -> tuple[str, Limits, list[str]]:
        arguments = arguments or {}
        unknown = sorted(set(arguments) - _ARGUMENTS)
        if unknown:
            raise error(code_invalid, f"run_python: unknown arguments {unknown}; expected {sorted(_ARGUMENTS)}")
        code = arguments.get("code")
        if not isinstance(code, str):
            raise error(code_invalid, "run_python: 'code' is required and must be a string of Python source")
        if len(code.encode("utf-8", "surrogatepass")) > MAX_CODE_BYTES:
            raise error(code_invalid, f"run_python: 'code' is over {MAX_CODE_BYTES} bytes")
        changes: dict[str, int] = {}
        bounds = {"timeout_ms": (1, min(self.options.max_timeout_ms, MAX_TIMEOUT_MS)), "memory_mb": (16, 4095),
                  "max_tool_calls": (0, 10_000)}  # fmt: skip
        for key, (low, high) in bounds.items():
            if key in arguments:
                value = arguments[key]
                if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                    raise error(code_invalid, f"run_python: '{key}' must be an integer from {low} to {high}")
                changes[key] = value
        servers = arguments.get("servers", [])
        if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers) or len(servers) > 100:
            raise error(code_invalid, "run_python: 'servers' must be a list of server ids")
        return code, replace(self.options.limits, **changes), servers

    async def _connect(self, servers: list[str]) -> list[str]:
        """Connects the servers the code says it will use; returns a warning per one unavailable."""
        if not servers:
            return []
        if self.broker is None:
            return [f"server {s!r} is not configured (no MCP servers are)" for s in servers]
        known = [s for s in servers if s in self.broker.config.servers]
        warnings = [f"server {s!r} is not configured" for s in servers if s not in known]
        problems: dict[str, str] = {}
        await anyio.to_thread.run_sync(lambda: self.broker.fetch_listings(known, 30.0, [], problems))
        return warnings + list(problems.values())

    def _elicitation(self, ctx: Any) -> tuple[bool, bool]:
        """(whether the client can answer elicitation, whether it must be asked the 2026 way)."""
        from mcp.types import ClientCapabilities, ElicitationCapability

        try:
            can = ctx.session.check_client_capability(ClientCapabilities(elicitation=ElicitationCapability()))
        except Exception:  # an older session object without the check
            can = False
        return bool(can), str(getattr(ctx, "protocol_version", "")).startswith("2026")

    async def _elicit(self, ctx: Any, request: dict[str, Any]) -> bool:
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


def _session_key(ctx: Any) -> int:
    """Binds a paused run to the client that started it."""
    return hash(getattr(ctx, "session_id", None) or "")
