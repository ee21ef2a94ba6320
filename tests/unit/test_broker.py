"""The broker and pool against in-process MCP servers: no processes, no wasm, fast.

Each test drives the broker the way the sandbox does (a `RunState`, `start_call`, `wait`);
the servers are `MCPServer`s reached through the pool's client factory over the SDK's
in-memory transport. What needs a process boundary (crashes, garbage on a pipe, huge
replies) is tested in tests/integration and tests/security with real subprocesses.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.session import MessageHandlerFnT
from mcp.server import MCPServer, Server, ServerRequestContext
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    ListToolsResult,
    PaginatedRequestParams,
    Tool,
    ToolAnnotations,
    ToolListChangedNotification,
)

from wasmexec._audit import AuditLog
from wasmexec._limits import Limits
from wasmexec._runctx.calllog import CANCELLED
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import HostCallError
from wasmexec._tools import mcp_errors
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import ServerConfig, parse_config
from wasmexec._tools.policy import Policy
from wasmexec._tools.pool import Breaker, DeadlineReached, Pool, ServerBusy, ServerUnavailable

WAIT_S = 20.0  # generous bound for one call on a noisy machine; calls here take milliseconds


def _tools_server() -> MCPServer:
    server = MCPServer("tools", version="1.0.0", log_level="WARNING")

    @server.tool(name="get-sum")
    async def get_sum(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def wipe(paths: list[str]) -> str:
        """Delete paths (destructive)."""
        return f"wiped {len(paths)}"

    @server.tool()
    async def sleep_for(seconds: float) -> float:
        """Sleep, then return `seconds`."""
        await anyio.sleep(seconds)
        return seconds

    @server.tool()
    async def fail() -> str:
        """Report an error (isError)."""
        raise ToolError("it broke")

    @server.tool()
    async def reject() -> str:
        """Answer with a JSON-RPC invalid-params error."""
        raise MCPError(INVALID_PARAMS, "the server disagrees with the arguments")

    return server


ClientFactory = Callable[[ServerConfig, MessageHandlerFnT], Any]


def _in_process(servers: dict[str, MCPServer]) -> ClientFactory:
    def open_client(config: ServerConfig, on_message: MessageHandlerFnT) -> Client:
        return Client(servers[config.server_id], message_handler=on_message, cache=None)

    return open_client


def _never_starts(config: ServerConfig, on_message: MessageHandlerFnT) -> Any:
    @asynccontextmanager
    async def failing() -> AsyncIterator[Client]:
        raise OSError(2, "No such file or directory")
        yield  # pragma: no cover

    return failing()


def _config(*server_ids: str, **extra: object) -> Any:
    return parse_config({"mcpServers": {sid: {"command": "in-process", **extra} for sid in server_ids}})


@contextmanager
def _broker(tmp_path: Path, *, policy: Policy | None = None, warnings: list[str] | None = None,
            factory: ClientFactory | None = None, **extra: object) -> Iterator[Broker]:  # fmt: skip
    audit = AuditLog(tmp_path / "audit.jsonl")
    sink = warnings if warnings is not None else []
    with Broker(_config("tools", **extra), policy=policy, audit=audit, warn=sink.append,
                client_factory=factory or _in_process({"tools": _tools_server()})) as broker:  # fmt: skip
        yield broker


def _run(broker: Broker, *, timeout_ms: int = 30_000, approver: Any = None) -> RunState:
    run = RunState(limits=Limits(timeout_ms=timeout_ms), tools=broker, run_id=uuid.uuid4().hex)
    run.approver = approver
    return run


def _start(run: RunState, tool: str, arguments: Any, server_id: str = "tools") -> int | HostCallError:
    """What the sandbox does for one call: count it, take a handle, start it (or take the refusal)."""
    run.tool_calls += 1
    handle = run.next_handle()
    run.reserve(handle, len(json.dumps(arguments)))
    try:
        run.tools.start_call(run, handle, server_id, tool, arguments)
    except HostCallError as error:
        return error
    return handle


def _call(run: RunState, tool: str, arguments: Any, server_id: str = "tools") -> str | HostCallError:
    handle = _start(run, tool, arguments, server_id)
    if isinstance(handle, HostCallError):
        return handle
    ready = run.wait([handle], WAIT_S)
    assert ready, f"{tool} did not finish"
    return ready[0][1]


def _audit(tmp_path: Path) -> list[dict[str, Any]]:
    """The tool_call lines; read after the broker closed, when every call has been written."""
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    return [line for line in lines if line["kind"] == "tool_call"]


def _wait_until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


# -- calls, refusals, the trace and the audit ----------------------------------------------------


def test_a_call_is_answered_traced_and_audited(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker)
        assert json.loads(str(_call(run, "get_sum", {"a": 1, "b": 2}))) == {"result": 3}
        run.finish()
    assert [(e["tool_name"], e["ok"]) for e in run.tool_trace] == [("get-sum", True)]
    (line,) = _audit(tmp_path)
    assert line["outcome"] == "ok" and line["approval"] == "not_required" and line["tool"] == "get-sum"
    assert line["argument_digest"].startswith("sha256:") and line["result_bytes"] == len('{"result":3}')


def test_every_refused_call_attempt_is_traced_and_audited(tmp_path: Path) -> None:
    policy = Policy(deny=("tools.fail",), max_tool_calls=5)
    with _broker(tmp_path, policy=policy) as broker:
        run = _run(broker)
        refused = [
            _start(run, "get_sum", [1, 2]),  # arguments not an object
            _start(run, "get_summ", {}),  # no such tool
            _start(run, "get_sum", {"a": "one", "b": 2}),  # schema validation
            _start(run, "fail", {}),  # denied by policy
            _start(run, "get_sum", {"a": 1, "b": 2}),  # the fifth call is allowed...
            _start(run, "get_sum", {"a": 1, "b": 2}),  # ...the sixth is over the policy's cap
        ]
        kinds = [r.kind if isinstance(r, HostCallError) else "started" for r in refused]
        assert kinds == ["invalid-argument", "not-found", "invalid-argument", "denied", "started", "limit-exceeded"]
        run.wait([refused[4]], WAIT_S)  # type: ignore[list-item]
        run.finish()
    trace = run.tool_trace
    assert len(trace) == 6 and [e["ok"] for e in trace] == [False] * 4 + [True, False]
    assert [e["error"].split(":")[0] for e in trace if not e["ok"]] == [
        "invalid-argument", "not-found", "invalid-argument", "denied", "limit-exceeded"]  # fmt: skip
    assert trace[2]["tool_name"] == "get-sum"  # the protocol name once the tool is known
    lines = _audit(tmp_path)
    assert sorted(line["outcome"] for line in lines) == sorted(
        ["invalid-argument", "not-found", "invalid-argument", "denied", "ok", "limit-exceeded"])  # fmt: skip


def test_a_call_cancelled_because_the_run_ended_is_recorded_as_cancelled(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker)
        assert isinstance(_start(run, "sleep_for", {"seconds": 60}), int)
        run.finish()  # the guest is done: the call is cancelled
    (entry,) = run.tool_trace
    assert entry["ok"] is False and entry["error"] == CANCELLED
    (line,) = _audit(tmp_path)
    assert line["outcome"] == "cancelled"


def test_a_call_cut_off_by_the_runs_deadline_is_cancelled_not_a_server_failure(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker, timeout_ms=300)
        handle = _start(run, "sleep_for", {"seconds": 60})
        assert isinstance(handle, int)
        _wait_until(lambda: not run.calls.is_open(handle))
        (entry,) = run.tool_trace
        assert entry["ok"] is False and entry["error"] == CANCELLED
        assert broker.pool._connections["tools"].breaker.failures == 0
        assert json.loads(str(_call(_run(broker), "sleep_for", {"seconds": 0}))) == {"result": 0}
    assert [line["outcome"] for line in _audit(tmp_path)] == ["cancelled", "ok"]


# -- discovery ----------------------------------------------------------------------------------


def test_describe_server_reports_name_version_and_tool_count(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        view = broker.catalog(_run(broker), "describe_server", {"server_id": "tools"})
    assert view["server_name"] == "tools" and view["version"] == "1.0.0" and view["tool_count"] == 5
    assert view["module"] == "tools"


def test_list_tools_detail_levels_add_fields(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker)
        views = {d: broker.catalog(run, "list_tools", {"server_id": "tools", "detail": d})[0]
                 for d in ("name", "description", "full")}  # fmt: skip
        with pytest.raises(HostCallError, match="detail must be one of"):
            broker.catalog(run, "list_tools", {"server_id": "tools", "detail": "everything"})
    assert views["name"] == {"tool_name": "get-sum", "export_name": "get_sum"}
    assert set(views["description"]) == {"tool_name", "export_name", "description", "annotations", "needs_approval"}
    assert {"input_schema", "output_schema", "signature"} <= set(views["full"])
    assert views["full"]["signature"].startswith("async def get_sum(")


def test_unknown_servers_and_tools_are_not_found_with_suggestions(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker)
        with pytest.raises(HostCallError, match="Did you mean 'tools'") as server:
            broker.catalog(run, "describe_server", {"server_id": "tool"})
        with pytest.raises(HostCallError, match="get_sum") as tool:
            broker.catalog(run, "get_tool", {"server_id": "tools", "tool_name": "get_summ"})
    assert server.value.kind == tool.value.kind == "not-found" and server.value.detail["what"] == "server"


# -- approvals ------------------------------------------------------------------------------------


def test_the_approver_is_asked_with_the_complete_question_and_its_answer_is_recorded(tmp_path: Path) -> None:
    asked: list[dict[str, Any]] = []
    paths = ["scratch/cache" + " " * 600, "home/user/documents"]
    with _broker(tmp_path) as broker:
        run = _run(broker, approver=lambda request: asked.append(request) or True)
        assert _call(run, "wipe", {"paths": paths}) == '{"result":"wiped 2"}'
        denied = _run(broker, approver=lambda request: False)
        error = _call(denied, "wipe", {"paths": paths})
    assert isinstance(error, HostCallError) and error.kind == "denied"
    (request,) = asked
    assert "home/user/documents" in request["question"] and "tools.wipe" in request["question"]
    assert run.approvals == ["APPROVED"] and denied.approvals == ["DENIED"]
    assert [line["approval"] for line in _audit(tmp_path)] == ["approved", "denied"]


def test_a_run_that_ends_while_the_user_is_asked_records_the_call_as_cancelled(tmp_path: Path) -> None:
    asking, answer = threading.Event(), threading.Event()

    def approver(request: dict[str, Any]) -> bool:
        asking.set()
        answer.wait(WAIT_S)
        return True

    with _broker(tmp_path) as broker:
        run = _run(broker, approver=approver)
        assert isinstance(_start(run, "wipe", {"paths": ["a"]}), int)
        assert asking.wait(WAIT_S)
        run.finish()
        answer.set()  # too late: the run is over
    assert run.tool_trace[0]["error"] == CANCELLED
    (line,) = _audit(tmp_path)
    assert line["outcome"] == "cancelled" and line["approval"] == "asked"


def test_a_pre_approved_call_is_reported_approved_without_asking(tmp_path: Path) -> None:
    asked: list[dict[str, Any]] = []
    with _broker(tmp_path, policy=Policy(pre_approved=("tools.wipe",))) as broker:
        run = _run(broker, approver=lambda request: asked.append(request) or False)
        assert not isinstance(_call(run, "wipe", {"paths": ["a"]}), HostCallError)
    assert asked == [] and run.approvals == ["APPROVED"]
    (line,) = _audit(tmp_path)
    assert line["approval"] == "pre_approved" and line["outcome"] == "ok"


def test_a_call_whose_question_is_too_large_to_show_is_refused_without_asking(tmp_path: Path) -> None:
    asked: list[dict[str, Any]] = []
    with _broker(tmp_path) as broker:
        run = _run(broker, approver=lambda request: asked.append(request) or True)
        error = _call(run, "wipe", {"paths": [f"dir/{n}/" + "p" * 90 for n in range(60)]})
        run.finish()
    assert isinstance(error, HostCallError) and error.kind == "denied" and "too large to show" in error.message
    assert asked == [] and run.approvals == ["DENIED"]
    assert run.tool_trace[0]["error"].startswith("denied: ")
    (line,) = _audit(tmp_path)
    assert line["approval"] == "too_large_to_show" and line["outcome"] == "denied"


def test_without_an_approver_a_call_that_needs_approval_is_denied_with_a_hint(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker)
        error = _call(run, "wipe", {"paths": ["a"]})
    assert isinstance(error, HostCallError) and error.kind == "denied" and "--approve" in error.hint
    assert run.approvals == ["DENIED"] and _audit(tmp_path)[0]["approval"] == "no_one_to_ask"


# -- policy on the names users see ---------------------------------------------------------------


def test_policy_globs_on_python_names_apply_to_the_protocol_names(tmp_path: Path) -> None:
    with _broker(tmp_path, policy=Policy(deny=("tools.get_sum",))) as broker:
        error = _call(_run(broker), "get-sum", {"a": 1, "b": 2})
    assert isinstance(error, HostCallError) and error.kind == "denied" and "get-sum" in error.message


def test_policy_globs_that_match_no_tool_are_warned_about_once_the_tools_are_known(tmp_path: Path) -> None:
    warnings: list[str] = []
    policy = Policy(deny=("tools.get_sum", "tools.nope", "tolls.*"))
    with _broker(tmp_path, policy=policy, warnings=warnings) as broker:
        broker.catalog_for(_run(broker))  # a run starts: the server's tools are not known yet
        assert len(warnings) == 1 and "'tolls.*'" in warnings[0]
        broker.fetch_listings(["tools"], WAIT_S, [])
        broker.fetch_listings(["tools"], WAIT_S, [])
    assert len(warnings) == 2 and "'tools.nope'" in warnings[1]


def test_a_change_announced_while_the_server_is_listed_is_listed_again_and_cached(tmp_path: Path) -> None:
    # The TypeScript servers announce tools/list_changed right after connecting, i.e. while the first
    # listing is in flight; that listing was then never cached, so every new process started them again.
    handlers: list[MessageHandlerFnT] = []
    listings = [0]

    async def list_tools(ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
        listings[0] += 1
        if listings[0] == 1:  # the change lands while this listing is in flight
            await handlers[0](ToolListChangedNotification())
            return ListToolsResult(tools=[_EARLY])
        return ListToolsResult(tools=[_EARLY, _LATE])

    server = Server("changing", version="1.0.0", on_list_tools=list_tools)

    def open_client(config: ServerConfig, on_message: MessageHandlerFnT) -> Client:
        handlers.append(on_message)
        return Client(server, message_handler=on_message, cache=None)

    with _broker(tmp_path, factory=open_client) as broker:
        (listing,) = broker.fetch_listings(["tools"], WAIT_S, []).values()
        cached = broker.cache.get(broker._key("tools"))
    assert [tool["name"] for tool in listing.tools] == ["early", "late"] and listings[0] == 2
    assert cached is not None and [tool["name"] for tool in cached.value["tools"]] == ["early", "late"]


_EARLY = Tool(name="early", description="There from the start.", input_schema={"type": "object"})
_LATE = Tool(name="late", description="Added right after the server started.", input_schema={"type": "object"})


# -- the breaker: only the server's own failures count ----------------------------------------


def test_the_breaker_lets_a_trial_call_through_after_its_cooldown() -> None:
    now = [0.0]
    breaker = Breaker(threshold=2, cooldown_s=30, clock=lambda: now[0])
    breaker.failed()
    breaker.check("s")  # one failure: still closed
    breaker.failed()
    with pytest.raises(ServerUnavailable, match="paused"):
        breaker.check("s")
    now[0] = 31.0
    breaker.check("s")  # half-open: the trial goes through
    with pytest.raises(ServerUnavailable):
        breaker.check("s")  # others wait for the trial's outcome
    breaker.succeeded()
    breaker.check("s")


def test_a_server_that_fails_to_start_opens_its_breaker_after_three_attempts(tmp_path: Path) -> None:
    with _broker(tmp_path, factory=_never_starts) as broker:
        errors = [_call(_run(broker), "anything", {}) for _ in range(4)]
    messages = [error.message for error in errors if isinstance(error, HostCallError)]
    assert len(messages) == 4 and "failed to start" in messages[0] and "paused" in messages[3]


def test_a_full_queue_refuses_with_a_retryable_error_and_never_opens_the_breaker() -> None:
    pool = Pool(_config("tools").servers, client_factory=_in_process({"tools": _tools_server()}),
                max_concurrent_calls=1, max_queued_calls=1)  # fmt: skip

    async def main() -> list[BaseException | None]:
        outcomes: list[BaseException | None] = []

        async def call(seconds: float) -> None:
            try:
                await pool.call_tool("tools", "sleep_for", {"seconds": seconds}, 5.0)
                outcomes.append(None)
            except Exception as exc:
                outcomes.append(exc)

        async with pool, anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(call, 0.3)
                await anyio.sleep(0.02)
        return outcomes

    outcomes = anyio.run(main)
    busy = [o for o in outcomes if isinstance(o, ServerBusy)]
    assert outcomes.count(None) == 2 and len(busy) == 3
    assert busy[0].retryable and "retry" in busy[0].hint.lower()
    assert pool._connections["tools"].breaker.failures == 0
    error = mcp_errors.to_host_error(busy[0], "tools", "sleep_for")
    assert error.kind == "unavailable" and error.detail["retryable"] is True and "retry" in error.hint.lower()


def test_a_server_timeout_counts_towards_the_breaker_but_the_callers_deadline_does_not() -> None:
    config = _config("tools", timeout=0.2).servers
    pool = Pool(config, client_factory=_in_process({"tools": _tools_server()}))

    async def main() -> tuple[BaseException, BaseException, int, int]:
        async with pool:
            try:
                await pool.call_tool("tools", "sleep_for", {"seconds": 10}, 0.1)  # the caller gives up first
            except Exception as exc:
                callers = exc
            after_callers = pool._connections["tools"].breaker.failures
            try:
                await pool.call_tool("tools", "sleep_for", {"seconds": 10}, 30.0)  # the server's 0.2 s fires
            except Exception as exc:
                servers = exc
            return callers, servers, after_callers, pool._connections["tools"].breaker.failures

    callers, servers, after_callers, after_servers = anyio.run(main)
    assert isinstance(callers, DeadlineReached) and after_callers == 0
    assert isinstance(servers, ServerUnavailable) and not isinstance(servers, DeadlineReached)
    assert "0.2 s" in str(servers) and after_servers == 1


# -- one place maps MCP errors to guest errors --------------------------------------------------


def test_is_error_results_become_tool_errors_with_the_servers_text(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        error = _call(_run(broker), "fail", {})
    assert isinstance(error, HostCallError) and error.kind == "tool-error" and "it broke" in error.message


def test_a_server_rejecting_validated_arguments_drops_the_cached_schema(tmp_path: Path) -> None:
    with _broker(tmp_path) as broker:
        run = _run(broker)
        error = _call(run, "reject", {})
        assert isinstance(error, HostCallError) and error.kind == "invalid-argument"
        assert "disagrees" in error.message
        assert broker.cache.get(broker._key("tools")) is None  # the next run lists the tools again


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (MCPError(INVALID_PARAMS, "bad"), "invalid-argument"),
        (MCPError(METHOD_NOT_FOUND, "no such method"), "not-found"),
        (MCPError(CONNECTION_CLOSED, "Connection closed"), "unavailable"),
        (MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out"), "unavailable"),
        (MCPError(INTERNAL_ERROR, "Error executing tool"), "tool-error"),
        (MCPError(-32099, "401 Unauthorized"), "authentication"),
        (MCPError(CONNECTION_CLOSED, "SSE stream failed: Server-sent event exceeded the 8388608 byte limit."),
         "limit-exceeded"),
        (ServerUnavailable("server 'x' failed to start"), "unavailable"),
        (DeadlineReached("server 'x' did not answer before the run's deadline"), "limit-exceeded"),
        (RuntimeError("a bug"), "internal"),
    ],
)  # fmt: skip
def test_mcp_and_transport_errors_map_to_one_guest_error_kind_each(exc: Exception, kind: str) -> None:
    error = mcp_errors.to_host_error(exc, "x", "t")
    assert error.kind == kind and error.message and (error.hint or kind == "internal")


def test_a_host_call_error_passes_through_unchanged() -> None:
    error = HostCallError("denied", "no")
    assert mcp_errors.to_host_error(error, "x", "t") is error


# -- replies over the size cap are dropped as they arrive ---------------------------------------


def test_the_line_reader_drops_an_oversized_line_as_it_arrives_and_keeps_the_rest() -> None:
    from wasmexec._tools.transports import LineSplitter

    lines = LineSplitter(limit=100)
    out = [*lines.feed(b'{"a":1}\n{"jsonrpc":"2.0","id":7,"result":{"text":"'), *lines.feed(b"x" * 10_000)]
    assert out == [b'{"a":1}'] and len(lines._buffer) == 0  # nothing of the big line is held but its edges
    out = lines.feed(b'"}}\n{"b":2}\n{"c"')
    assert out[1:] == [b'{"b":2}'] and out[0].size > 10_000 and out[0].request_id() == 7  # type: ignore[union-attr]
    assert lines.feed(b":3}\n") == [b'{"c":3}']


@pytest.mark.parametrize(
    ("line", "request_id", "is_request"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[' + b"x" * 300, 7, False),  # Python SDK order
        (b'{"jsonrpc":"2.0","id":"r-1","error":{"message":"' + b"x" * 300, "r-1", False),
        (b'{"result":{"content":[{"text":"' + b"x" * 300 + b'"}]},"jsonrpc":"2.0","id":12}', 12, False),  # TS order
        (b'{"result":{"text":"' + b"x" * 300 + b'","id":3}}', None, False),  # a nested "id" is not the message's
        (b'{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{"x":"' + b"x" * 300, None, True),
        (b'{"method":"notifications/message","params":{"data":"' + b"x" * 300, None, True),
    ],
)  # fmt: skip
def test_an_oversized_message_fails_only_the_request_it_answers(
    line: bytes, request_id: object, is_request: bool
) -> None:
    from wasmexec._tools.transports import LineSplitter

    (oversized,) = LineSplitter(limit=100).feed(line + b"\n")
    assert not isinstance(oversized, bytes)
    assert oversized.request_id() == request_id and oversized.is_request() is is_request


def _http_reply(status: int, body: bytes, **headers: str) -> Any:
    import httpx2

    request = httpx2.Request("POST", "http://127.0.0.1:1/mcp")
    return httpx2.Response(status, headers=headers, stream=httpx2.ByteStream(body), request=request)


def _read(response: Any) -> bytes:
    from wasmexec._tools.transports import bound_reply

    async def main() -> bytes:
        await bound_reply(response)
        return bytes(await response.aread())

    return anyio.run(main)


def test_an_http_reply_over_the_cap_fails_as_it_is_read_and_one_under_it_arrives() -> None:
    import httpx2

    from wasmexec._tools.transports import MAX_MESSAGE_BYTES

    small = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    assert _read(_http_reply(200, small, **{"content-type": "application/json"})) == small
    with pytest.raises(httpx2.StreamError, match="reply too large"):
        _read(_http_reply(200, b"x" * (MAX_MESSAGE_BYTES + 1), **{"content-type": "application/json"}))


def test_a_compressed_http_reply_is_capped_after_decompression() -> None:
    import gzip

    import httpx2

    from wasmexec._tools.transports import MAX_MESSAGE_BYTES

    bomb = gzip.compress(b"0" * (4 * MAX_MESSAGE_BYTES))  # about 32 KB on the wire
    assert len(bomb) < 100_000
    with pytest.raises(httpx2.StreamError, match="reply too large"):
        _read(_http_reply(200, bomb, **{"content-type": "application/json", "content-encoding": "gzip"}))
    packed = gzip.compress(b'{"ok":true}')
    assert _read(_http_reply(200, packed, **{"content-type": "application/json", "content-encoding": "gzip"})) == (
        b'{"ok":true}'
    )


def test_a_bare_401_becomes_a_json_rpc_error_that_names_it() -> None:
    body = json.loads(_read(_http_reply(401, b"go away", **{"content-type": "text/plain"})))
    assert body["error"]["message"].startswith("HTTP 401 Unauthorized")
    error = mcp_errors.to_host_error(MCPError(body["error"]["code"], body["error"]["message"]), "x", "t")
    assert error.kind == "authentication"
