"""The tool host: answers the sandbox's discovery queries and tool calls.

Runs on the host, between the guest's host functions (called on wasm worker
threads) and the async `Pool` (on the broker's own event loop thread, a blocking
portal). Every call is checked against the run's frozen catalog, validated against
the tool's input schema before the server sees it, bounded by the run's deadline,
traced (never its arguments or results) and cancelled when the run ends.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.from_thread

from wasmexec._audit import AuditLog, digest
from wasmexec._redact import Redactor
from wasmexec._runstate import RunState
from wasmexec._toolhost import SPEC_VERSION, HostCallError, encode_payload
from wasmexec._tools import stubs as _stubs
from wasmexec._tools.catalog import DETAILS, Catalog, ToolEntry
from wasmexec._tools.config import Config
from wasmexec._tools.policy import Decision, Policy, RateLimiter
from wasmexec._tools.pool import Listing, Pool, ServerUnavailable
from wasmexec._tools.schema_cache import SchemaCache, cache_key
from wasmexec._tools.validation import validate_arguments

#: Discovery must answer quickly even when the run has a long deadline.
MAX_DISCOVERY_WAIT_S = 60.0
#: Search results per query unless the code asks for more.
DEFAULT_SEARCH_LIMIT = 10


class Broker:
    """Connects sandbox runs to the configured MCP servers. A context manager; close is idempotent."""

    def __init__(
        self,
        config: Config,
        *,
        cache_path: Path | None = None,
        redactor: Redactor | None = None,
        errlog: TextIO | None = None,
        warn: Any = None,
        cache: SchemaCache | None = None,
        policy: Policy | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        """
        Args:
            config: the servers (`load_config` / `parse_config`).
            cache_path: where tool schemas persist between processes; None keeps them in memory.
            redactor: gets every server's env and header values as secrets.
            errlog: where stdio servers' stderr goes (default: this process's stderr).
            warn: receives cache warnings (default: `warnings.warn`).
            cache: a ready SchemaCache (tests inject one with a fake clock); overrides cache_path.
            policy: allow/deny globs, approvals, rate limits (default: allow all, ask before destructive tools).
            audit: where each tool call is recorded (digests and sizes only).
        """
        self.config = config
        self.redactor = redactor if redactor is not None else Redactor()
        for server in config.servers.values():
            for secret in server.secrets():
                self.redactor.add_secret(secret)
        self.cache = cache if cache is not None else SchemaCache(cache_path, warn=warn)
        self.policy = policy if policy is not None else Policy()
        self.audit = audit
        self._rates = RateLimiter(self.policy.rate_limits)
        self.pool = Pool(config.servers, on_tools_changed=self._tools_changed, errlog=errlog or sys.stderr)
        self._generation: dict[str, int] = {}
        self._portal_cm: Any = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._pool_cm: Any = None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Broker:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> None:
        if self._portal is not None:
            return
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._pool_cm = self._portal.wrap_async_context_manager(self.pool)
        self._pool_cm.__enter__()

    def close(self) -> None:
        """Stops every server process and the broker's event loop thread."""
        if self._portal is None:
            return
        try:
            self._pool_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)
            self._portal = None

    @property
    def portal(self) -> anyio.from_thread.BlockingPortal:
        if self._portal is None:
            self.open()
        assert self._portal is not None
        return self._portal

    # -- listings ---------------------------------------------------------------------------
    def _key(self, server_id: str) -> str:
        return cache_key(server_id, self.config.servers[server_id].fingerprint)

    def _tools_changed(self, server_id: str) -> None:
        # A listing in flight may predate the change: its generation no longer matches, so it is not cached.
        self._generation[server_id] = self._generation.get(server_id, 0) + 1
        self.cache.invalidate(self._key(server_id))  # takes effect from the next run

    def fetch_listings(
        self,
        server_ids: list[str],
        timeout: float,
        warnings: list[str],
        problems: dict[str, str] | None = None,
        *,
        use_cache: bool = True,
    ) -> dict[str, Listing]:
        """Listings from the cache, else from the servers in parallel; stale ones if a server fails.

        A server that can be listed neither way is left out; why goes to `warnings` and `problems`."""
        found: dict[str, Listing] = {}
        missing = []
        for server_id in server_ids:
            entry = self.cache.get(self._key(server_id)) if use_cache else None
            if entry is not None:
                found[server_id] = Listing.from_json(entry.value)
            else:
                missing.append(server_id)
        if missing:
            generations = {server_id: self._generation.get(server_id, 0) for server_id in missing}
            fetched = self.portal.call(self._list_many, missing, min(timeout, MAX_DISCOVERY_WAIT_S))
            for server_id, outcome in fetched.items():
                found.update(self._settle(server_id, outcome, warnings, generations[server_id]))
                if isinstance(outcome, ServerUnavailable) and problems is not None:
                    problems[server_id] = str(outcome)
        return found

    def _settle(
        self, server_id: str, outcome: Listing | ServerUnavailable, warnings: list[str], generation: int
    ) -> dict[str, Listing]:
        if isinstance(outcome, Listing):
            if self._generation.get(server_id, 0) == generation:
                self.cache.put(self._key(server_id), outcome.to_json())
            return {server_id: outcome}
        stale = self.cache.get_stale(self._key(server_id))
        if stale is not None:
            warnings.append(f"server {server_id!r} is unavailable ({outcome}); using its cached tool list")
            return {server_id: Listing.from_json(stale.value)}
        warnings.append(str(outcome))
        return {}

    async def _list_many(self, server_ids: list[str], timeout: float) -> dict[str, Listing | ServerUnavailable]:
        results: dict[str, Listing | ServerUnavailable] = {}

        async def one(server_id: str) -> None:
            try:
                results[server_id] = await self.pool.list_tools(server_id, timeout)
            except ServerUnavailable as exc:
                results[server_id] = exc

        async with anyio.create_task_group() as group:
            for server_id in server_ids:
                group.start_soon(one, server_id)
        return results

    def refresh(self, server_ids: list[str], timeout: float = MAX_DISCOVERY_WAIT_S) -> dict[str, str]:
        """Re-lists servers now (the `tools refresh` command): server id → "ok" or the error.

        A server that fails keeps its cached entry (refreshing never loses a known tool list)."""
        warnings: list[str] = []
        problems: dict[str, str] = {}
        self.fetch_listings(server_ids, timeout, warnings, problems, use_cache=False)
        return {sid: problems.get(sid, "ok") for sid in server_ids}

    def catalog_for(self, run: RunState | None = None) -> Catalog:
        """The run's frozen catalog (created on its first use)."""
        if run is not None and isinstance(run.catalog, Catalog):
            return run.catalog
        warnings: list[str] = run.warnings if run is not None else []

        def fetch(server_ids: list[str]) -> tuple[dict[str, Listing], dict[str, str]]:
            timeout = run.remaining() if run is not None else MAX_DISCOVERY_WAIT_S
            problems: dict[str, str] = {}
            listings = self.fetch_listings(server_ids, timeout, warnings, problems)
            return listings, problems

        catalog = Catalog(self.config.servers, fetch)
        if run is not None:
            run.catalog = catalog
        return catalog

    # -- ToolHost ---------------------------------------------------------------------------
    def catalog(self, run: RunState, op: str, request: Any) -> Any:
        if not isinstance(request, dict):
            raise HostCallError("invalid-argument", "the request must be a JSON object")
        catalog = self.catalog_for(run)
        detail = request.get("detail", "description")
        if detail not in DETAILS:
            raise HostCallError("invalid-argument", f"detail must be one of {list(DETAILS)}, not {detail!r}")
        if op == "spec_version":
            return SPEC_VERSION
        if op == "list_servers":
            return [catalog.server_view(server_id) for server_id in catalog.servers]
        if op == "describe_server":
            return catalog.server_view(_text(request, "server_id"), describe=True)
        if op == "list_tools":
            server_id = catalog.server_id(_text(request, "server_id"))
            return [catalog.tool_view(entry, detail) for entry in catalog.tools(server_id).values()]
        if op == "get_tool":
            entry = catalog.tool(_text(request, "server_id"), _text(request, "tool_name"))
            return {**catalog.tool_view(entry, "full", with_server=True),
                    "docstring": _stubs.tool_docstring(entry.export_name, entry.tool)}  # fmt: skip
        if op == "search_tools":
            limit = request.get("limit", DEFAULT_SEARCH_LIMIT)
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise HostCallError("invalid-argument", f"limit must be a positive integer, not {limit!r}")
            return catalog.search(_text(request, "query"), detail, request.get("server_id"), limit)
        if op == "module":
            return catalog.module(_text(request, "module"))
        raise HostCallError("invalid-argument", f"unknown catalog operation {op!r}")

    def start_call(self, run: RunState, handle: int, server_id: str, tool_name: str, arguments: Any) -> None:
        entry = self.catalog_for(run).tool(server_id, tool_name)
        if not isinstance(arguments, dict):
            raise HostCallError("invalid-argument", f"arguments to {entry.export_name} must be a JSON object")
        cap = self.policy.max_tool_calls
        if cap is not None and run.tool_calls > cap:
            raise HostCallError("limit-exceeded", f"the policy allows at most {cap} tool calls per run",
                                "Make fewer calls per run.", limit="tool_calls")  # fmt: skip
        decision = self.policy.decide(entry.server_id, entry.tool_name, entry.tool.get("annotations"))
        if decision == "deny":
            self._audit(run, entry, arguments, outcome="denied_by_policy", approval="denied")
            raise HostCallError("denied", f"{entry.server_id}.{entry.tool_name} is not allowed by the host's policy",
                                "This tool cannot be used here; the host's policy (--policy) decides.")  # fmt: skip
        validate_arguments(entry, arguments)
        if run.progress is not None:
            run.progress(f"calling {entry.server_id}.{entry.tool_name}")
        run.calls.open(handle, entry.server_id, entry.tool_name)
        future: Future[str] = self.portal.start_task_soon(self._call, run, handle, entry, arguments, decision)
        run.track(future)
        future.add_done_callback(lambda done: run.complete(handle, _outcome(done)))

    def refused(self, run: RunState, server_id: str, tool_name: str, error: HostCallError) -> None:
        """A call the sandbox refused before starting it (a cap, a size): audited like any other."""
        if self.audit is not None:
            self.audit.write("tool_call", run_id=run.run_id, trace_id=run.trace_id, code_digest=run.code_digest,
                             server=server_id[:200], tool=tool_name[:200], outcome=error.kind)  # fmt: skip

    async def _call(
        self, run: RunState, handle: int, entry: ToolEntry, arguments: dict[str, Any], decision: Decision
    ) -> str:
        started = time.monotonic()
        error: HostCallError | None = None
        approval = "not_required"
        text = ""
        try:
            if decision == "approve":
                approval = await self._approve(run, entry, arguments)
                if approval != "approved":
                    raise _not_approved(entry, approval)
            await self._wait_for_rate(run, entry)
            result = await self.pool.call_tool(entry.server_id, entry.tool_name, arguments, run.remaining())
            text = encode_payload(unwrap(result), f"the result of {entry.tool_name}")
        except ServerUnavailable as exc:
            error = HostCallError("unavailable", str(exc), exc.hint)
        except HostCallError as exc:
            error = exc
        except Exception as exc:
            error = self._protocol_error(entry, exc)
        finally:
            duration = round((time.monotonic() - started) * 1000, 3)
            run.calls.record(handle, ok=error is None,
                             error=None if error is None else f"{error.kind}: {error.message}")  # fmt: skip
            self._audit(run, entry, arguments, outcome="ok" if error is None else error.kind, approval=approval,
                        result_bytes=len(text.encode()), duration_ms=duration,
                        redactions=self.redactor.redact_text(text)[1] if text else 0)  # fmt: skip
        if error is not None:
            raise error
        return text

    async def _approve(self, run: RunState, entry: ToolEntry, arguments: dict[str, Any]) -> str:
        """Asks the user through the run's approver: "approved", "denied" or "no_one_to_ask"."""
        if run.approver is None:
            run.approvals.append("DENIED")
            return "no_one_to_ask"
        shown, _ = self.redactor.redact(arguments)
        request = {"server_id": entry.server_id, "tool_name": entry.tool_name,
                   "annotations": entry.tool.get("annotations") or {}, "arguments": shown}  # fmt: skip
        try:
            accepted = await anyio.to_thread.run_sync(run.approver, request, abandon_on_cancel=True)
        except Exception:
            accepted = False
        run.approvals.append("APPROVED" if accepted else "DENIED")
        return "approved" if accepted else "denied"

    async def _wait_for_rate(self, run: RunState, entry: ToolEntry) -> None:
        delay = self._rates.delay(entry.server_id)
        if delay > run.remaining():
            raise HostCallError("limit-exceeded", f"server {entry.server_id!r} is rate-limited past the run's deadline",
                                "Make fewer calls to this server per run.", limit="tool_calls")  # fmt: skip
        if delay > 0:
            await anyio.sleep(delay)

    def _audit(self, run: RunState, entry: ToolEntry, arguments: dict[str, Any], **fields: Any) -> None:
        if self.audit is None:
            return
        try:
            self.audit.write("tool_call", run_id=run.run_id, trace_id=run.trace_id, code_digest=run.code_digest,
                             server=entry.server_id, tool=entry.tool_name, argument_digest=digest(arguments),
                             **fields)  # fmt: skip
        except OSError as exc:  # auditing must not break the call; say so once per run
            run.warnings.append(f"the audit log could not be written: {exc}")

    def _protocol_error(self, entry: ToolEntry, exc: Exception) -> HostCallError:
        code = getattr(exc, "code", None)
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        if code == -32602:  # the server disagrees with the schema we validated against: it may be stale
            self.cache.invalidate(self._key(entry.server_id))
            return HostCallError(
                "invalid-argument",
                f"{entry.tool_name}: {message}",
                "The server rejected the arguments; its schema may have changed. Check get_tool().",
            )
        if code in (401, 403) or "401" in message or "Unauthorized" in message:
            return HostCallError("authentication", f"{entry.server_id}: {message}")
        return HostCallError(
            "tool-error", f"{entry.tool_name} failed: {message}", "The server reported an error; read the message."
        )


def _not_approved(entry: ToolEntry, approval: str) -> HostCallError:
    name = f"{entry.server_id}.{entry.tool_name}"
    if approval == "no_one_to_ask":
        return HostCallError(
            "denied", f"{name} needs the user's approval and there is no one to ask",
            "Use an MCP client that supports elicitation, pre-approve it (wasmexec run --approve GLOB), "
            "or change the host's policy.",
        )  # fmt: skip
    return HostCallError("denied", f"the user did not approve {name}",
                         "Do not retry the same call; ask the user or do something else.")  # fmt: skip


def _text(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise HostCallError("invalid-argument", f"{key} must be a non-empty string")
    return value


def unwrap(result: Any) -> Any:
    """structuredContent if present; one text block → str; otherwise the whole result (wire form)."""
    if result.is_error:
        texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
        raise HostCallError(
            "tool-error",
            "\n".join(texts) or "the tool reported an error",
            "The server reported an error; read the message.",
        )
    if result.structured_content is not None:
        return result.structured_content
    content = result.content
    if len(content) == 1 and getattr(content[0], "type", None) == "text":
        return content[0].text
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


def _outcome(future: Future[str]) -> str | HostCallError:
    if future.cancelled():
        return HostCallError("limit-exceeded", "the call was cancelled because the run ended", limit="cancelled")
    error = future.exception()
    if error is None:
        return future.result()
    if isinstance(error, HostCallError):
        return error
    return HostCallError("internal", f"host error: {type(error).__name__}: {error}")
