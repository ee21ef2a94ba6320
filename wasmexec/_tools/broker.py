"""The tool host: answers the sandbox's discovery queries and tool calls.

Runs on the host, between the guest's host functions (called on the run's worker
thread) and the async `Pool` (on the broker's own event loop thread, a blocking
portal). Every call is checked against the run's frozen catalog and the policy,
validated against the tool's input schema before the server sees it, asked of the
user when it needs approval, bounded by the run's deadline and cancelled when the
run ends.

Every call attempt, refused or not, leaves one `tool_trace` entry (`run.calls`) and
one audit line (digests and sizes, never arguments or results) with::

    outcome   "ok"; "cancelled" (the run ended, or its deadline passed, before the
              answer); "paused" (see approval); "replayed" (a replay answered it from
              the log of the run it replays, `replay_of`, without calling the server;
              `logged_outcome` says how it ended then); or the error kind ("invalid-argument", "not-found", "denied",
              "limit-exceeded", "unavailable", "tool-error", "authentication", ...)
    approval  "not_required"; "pre_approved" (by --approve or the policy's
              pre_approved globs); "approved" / "denied" (the user's answer);
              "asked" (the run ended before the answer); "paused" (the run ended
              to be replayed with the answer, 2026 era); "no_one_to_ask";
              "too_large_to_show" (refused: the question would be cut); "not_asked"
              (refused before approval came up)

A call that needed approval adds "APPROVED" (approved or pre-approved) or "DENIED"
to `run.approvals`, which the result's `approval_state` is made of. Threads: the
worker thread runs `catalog`, `start_call` and `refused`; the event loop runs
`_call` (approval, rate limit, the call, its trace entry and audit line) and writes
`run.approvals`.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.from_thread
import anyio.to_thread

from wasmexec._audit import AuditLog, digest, principal_field
from wasmexec._redact import PiiMode, Redactor
from wasmexec._runctx.calllog import CANCELLED
from wasmexec._runctx.journal import DIVERGED_HINT
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import SPEC_VERSION, CallKind, HostCallError, encode_payload, internal_error
from wasmexec._tools import approval, mcp_errors
from wasmexec._tools import upstream_resources as resources
from wasmexec._tools.catalog import DETAILS, Access, Catalog, ToolEntry
from wasmexec._tools.config import Config, with_server_policy
from wasmexec._tools.naming import export_names, module_names
from wasmexec._tools.pii import Given, PiiVault
from wasmexec._tools.policy import Decision, Policy, RateLimiter, UnmatchedGlobs
from wasmexec._tools.pool import MAX_LIST_PAGES, ClientFactory, Listing, Pool, ServerUnavailable
from wasmexec._tools.schema_cache import SchemaCache, cache_key, warn_runtime
from wasmexec._tools.shapes import ObservedReturns
from wasmexec._tools.validation import validate_arguments

if TYPE_CHECKING:
    from mcp.types import CallToolResult

#: Discovery must answer quickly even when the run has a long deadline.
MAX_DISCOVERY_WAIT_S = 60.0
#: Search results per query unless the code asks for more.
DEFAULT_SEARCH_LIMIT = 10
#: Listings of a server that announced a change while being listed: once more, then take what came.
MAX_LISTING_ROUNDS = 2


class Broker:
    """Connects sandbox runs to the configured MCP servers. A context manager; close is idempotent."""

    def __init__(
        self,
        config: Config,
        *,
        cache_path: Path | None = None,
        redactor: Redactor | None = None,
        errlog: TextIO | None = None,
        warn: Callable[[str], None] | None = None,
        cache: SchemaCache | None = None,
        policy: Policy | None = None,
        audit: AuditLog | None = None,
        client_factory: ClientFactory | None = None,
        pii: PiiMode | None = None,
    ) -> None:
        """
        Args:
            config: the servers (`load_config` / `parse_config`).
            cache_path: where tool schemas persist between processes; None keeps them in memory.
            redactor: gets each server's secret env and header values (`ServerConfig.secrets()`,
                see `_redact.is_secret`).
            errlog: where stdio servers' stderr goes (default: this process's stderr).
            warn: receives cache and policy warnings (default: a RuntimeWarning).
            cache: a ready SchemaCache (tests inject one with a fake clock); overrides cache_path.
            policy: allow/deny globs, approvals, rate limits (default: allow all, ask before destructive tools).
            audit: where each tool call is recorded (digests and sizes only).
            client_factory: makes each server's MCP client (default: real stdio/HTTP; tests pass in-process ones).
            pii: PII in tool results (`wasmexec._tools.pii`): ``tokenize``, ``redact`` or ``off``; None
                takes the policy's ``pii`` setting (off by default).
        """
        self.config = config
        self.redactor = redactor if redactor is not None else Redactor()
        for server in config.servers.values():
            for secret in server.secrets():
                self.redactor.add_secret(secret)
        self._warn = warn if warn is not None else warn_runtime
        self.cache = cache if cache is not None else SchemaCache(cache_path, warn=self._warn)
        self.observed = ObservedReturns(self.cache)
        # The servers' own pre-approved (Cline's autoApprove) and disabled tools join the policy.
        self.policy = with_server_policy(policy if policy is not None else Policy(), config)
        self.audit = audit
        self.pii: PiiMode = pii if pii is not None else self.policy.pii
        self._rates = RateLimiter(self.policy.rate_limits)
        self.pool = Pool(config.servers, on_tools_changed=self._tools_changed, errlog=errlog or sys.stderr,
                         client_factory=client_factory, on_secret=self.redactor.add_secret)  # fmt: skip
        self._generation: dict[str, int] = {}
        self._unmatched = UnmatchedGlobs(self.policy, module_names(config.servers))
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
        self._forget(server_id)  # takes effect from the next run

    def _forget(self, server_id: str) -> None:
        """Drops a server's tool list and the result shapes seen with it."""
        self.cache.invalidate(self._key(server_id))
        self.observed.invalidate(self._key(server_id))

    def fetch_listings(
        self,
        server_ids: list[str],
        timeout: float,
        warnings: list[str],
        problems: dict[str, ServerUnavailable] | None = None,
        *,
        use_cache: bool = True,
    ) -> dict[str, Listing]:
        """Listings from the cache, else from the servers in parallel; stale ones if a server fails.

        A server that can be listed neither way is left out; why goes to `warnings` and `problems`.
        A server that announces a change while it is being listed is listed once more, so the
        listing cached is the one after the change (the TypeScript servers announce one right
        after connecting; without this, every new process would start them again)."""
        found: dict[str, Listing] = {}
        missing = []
        for server_id in server_ids:
            entry = self.cache.get(self._key(server_id)) if use_cache else None
            if entry is not None:
                found[server_id] = Listing.from_json(entry.value)
            else:
                missing.append(server_id)
        for _ in range(MAX_LISTING_ROUNDS):
            if not missing:
                break
            generations = {server_id: self._generation.get(server_id, 0) for server_id in missing}
            fetched = self.portal.call(self._list_many, missing, min(timeout, MAX_DISCOVERY_WAIT_S))
            changed = {sid for sid in fetched if self._generation.get(sid, 0) != generations[sid]}
            missing = [sid for sid, outcome in fetched.items() if isinstance(outcome, Listing) and sid in changed]
            for server_id, outcome in fetched.items():
                found.update(self._settle(server_id, outcome, warnings, generations[server_id]))
                if isinstance(outcome, ServerUnavailable) and problems is not None:
                    problems[server_id] = outcome
        self._check_policy(found)
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
        problems: dict[str, ServerUnavailable] = {}
        self.fetch_listings(server_ids, timeout, warnings, problems, use_cache=False)
        return {sid: str(problems[sid]) if sid in problems else "ok" for sid in server_ids}

    def catalog_for(self, run: RunState | None = None) -> Catalog:
        """The run's frozen catalog (created on its first use)."""
        if run is not None and isinstance(run.catalog, Catalog):
            return run.catalog
        warnings: list[str] = run.warnings if run is not None else []

        def fetch(server_ids: list[str]) -> tuple[dict[str, Listing], dict[str, ServerUnavailable]]:
            timeout = run.remaining() if run is not None else MAX_DISCOVERY_WAIT_S
            problems: dict[str, ServerUnavailable] = {}
            listings = self.fetch_listings(server_ids, timeout, warnings, problems)
            return listings, problems

        catalog = Catalog(self.config.servers, fetch, decide=self._decide, observed=self._observed_returns)
        if run is not None:
            run.catalog = catalog
            self._check_policy()
        return catalog

    def _decide(self, entry: ToolEntry, module: str) -> Access:
        return self.policy.decide(entry.server_id, entry.tool_name, entry.tool.get("annotations"),
                                  export_name=entry.export_name, module=module)  # fmt: skip

    def _observed_returns(self, entry: ToolEntry) -> dict[str, Any] | None:
        return self.observed.get(self._key(entry.server_id), entry.tool_name, entry.digest)

    # -- policy globs that match nothing ------------------------------------------------------
    def _check_policy(self, listings: dict[str, Listing] | None = None) -> None:
        """Warns (once each) about policy globs that match no tool, as listings become known.

        Without `listings` (a run's first catalog): whatever the cache knows, starting nothing."""
        if listings is None:
            cached = {
                sid: self.cache.get_stale(self._key(sid)) for sid in self.config.servers if self._unmatched.wants(sid)
            }
            listings = {sid: Listing.from_json(entry.value) for sid, entry in cached.items() if entry is not None}
        tools = {sid: [*export_names(tool["name"] for tool in listing.tools).items(), *resources.NAMES]
                 for sid, listing in listings.items() if self._unmatched.wants(sid)}  # fmt: skip
        for warning in self._unmatched.check(tools):
            self._warn(warning)

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
        if op == "get_tool":  # full detail unless the code asks for less
            entry = catalog.tool(_text(request, "server_id"), _text(request, "tool_name"))
            level = request.get("detail", "full")
            view = catalog.tool_view(entry, level, with_server=True)
            return {**view, "docstring": catalog.docstring(entry)} if level == "full" else view
        if op == "search_tools":
            limit = request.get("limit", DEFAULT_SEARCH_LIMIT)
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise HostCallError("invalid-argument", f"limit must be a positive integer, not {limit!r}")
            return catalog.search(_text(request, "query"), detail, request.get("server_id"), limit)
        if op == "module":
            return catalog.module(_text(request, "module"))
        raise HostCallError("invalid-argument", f"unknown catalog operation {op!r}")

    def start_call(
        self, run: RunState, handle: int, server_id: str, tool_name: str, arguments: Any, *, kind: CallKind = "tool"
    ) -> None:
        if run.journal is not None and self._from_journal(run, handle, server_id, tool_name, kind, arguments):
            return
        entry: ToolEntry | None = None
        given = Given({})
        try:
            # Tokens the code got back become real values; everything this call returns is scrubbed of them.
            arguments, given = self._vault(run).restore(arguments)
            catalog = self.catalog_for(run)
            if kind in resources.OPERATIONS:
                entry = resources.entry(catalog.server_id(server_id), kind)
            else:
                entry = catalog.tool(server_id, tool_name)
            decision = self._admit(run, entry, catalog.module_names[entry.server_id], arguments, given)
        except Exception as exc:
            error = self._scrubbed(run, exc if isinstance(exc, HostCallError) else internal_error(exc), given)
            names = (entry.server_id, entry.tool_name) if entry is not None else (server_id, tool_name)
            run.calls.refused(handle, *names, f"{error.kind}: {error.message}")
            self._audit(run, *names, arguments, outcome=error.kind, approval="not_asked")
            if run.journal is not None:
                run.journal.done(handle, error, refused=True)
            raise error from None
        if run.progress is not None:
            run.progress(f"calling {entry.server_id}.{entry.tool_name}")
        run.calls.open(handle, entry.server_id, entry.tool_name)
        call = _StartedCall(run, handle, entry, arguments, given, kind)
        future: Future[str] = self.portal.start_task_soon(self._call, call, decision)
        run.track(future)
        future.add_done_callback(lambda done: _completed(run, handle, _outcome(done)))

    def _from_journal(
        self, run: RunState, handle: int, server_id: str, tool_name: str, kind: CallKind, arguments: Any
    ) -> bool:
        """A replayed run (`wasmexec._runctx.journal`): answers a logged call from the log, without its server
        (True); refuses a call that diverges from the log; leaves the others to run (False)."""
        journal = run.journal
        assert journal is not None
        verdict, logged = journal.start(handle, server_id, tool_name, kind, arguments)
        if verdict in ("live", "approved"):
            return False
        try:  # the names the first run traced (the catalog maps what the guest wrote)
            entry = self.catalog_for(run).tool(server_id, tool_name) if kind not in resources.OPERATIONS else None
            names = (entry.server_id, entry.tool_name) if entry is not None else (server_id, tool_name)
        except Exception:
            names = (server_id, tool_name)
        if verdict == "diverged":
            error = HostCallError("denied", f"replay diverged: {journal.diverged}", DIVERGED_HINT)
            run.calls.refused(handle, *names, f"{error.kind}: {error.message}")
            self._audit(run, *names, arguments, outcome="replay_diverged", approval="not_asked",
                        replay_of=journal.origin)  # fmt: skip
            raise error
        outcome, refused = logged
        failed = outcome if isinstance(outcome, HostCallError) else None
        self._audit(run, *names, arguments, outcome="replayed", approval="not_asked", replay_of=journal.origin,
                    logged_outcome="ok" if failed is None else failed.kind)  # fmt: skip
        if refused and failed is not None:
            run.calls.refused(handle, *names, f"{failed.kind}: {failed.message}")
            raise failed
        run.calls.open(handle, *names)
        run.calls.record(
            handle, ok=failed is None, error=None if failed is None else f"{failed.kind}: {failed.message}"
        )
        run.complete(handle, outcome)
        return True

    def _admit(self, run: RunState, entry: ToolEntry, module: str, arguments: Any, given: Given) -> Decision:
        """The checks before a call starts: its shape, the policy's cap and globs, the schema."""
        if not isinstance(arguments, dict):
            raise HostCallError("invalid-argument", f"arguments to {entry.export_name} must be a JSON object")
        cap = self.policy.max_tool_calls
        if cap is not None and run.tool_calls > cap:
            raise HostCallError("limit-exceeded", f"the policy allows at most {cap} tool calls per run",
                                "Make fewer calls per run.", limit="tool_calls")  # fmt: skip
        decision = self._decide(entry, module)
        if decision == "deny":
            raise HostCallError("denied", f"{entry.server_id}.{entry.tool_name} is not allowed by the host's policy",
                                "This tool cannot be used here; the host's policy (--policy) decides.")  # fmt: skip
        validate_arguments(entry, arguments, given.shown)  # the received values it quotes are cut: hide first
        return decision

    def refused(self, run: RunState, server_id: str, tool_name: str, error: HostCallError) -> None:
        """A call the sandbox refused before starting it (a cap, a size): audited like any other."""
        self._audit(run, server_id, tool_name, None, outcome=error.kind, approval="not_asked")

    async def _call(self, call: _StartedCall, decision: Decision) -> str:
        if decision == "approve":
            call.approval = "asked"  # until the answer comes: a run that ends meanwhile leaves it so
        try:
            call.approval, refusal = await approval.settle(call.run, call.entry, call.arguments, decision,
                                                           self.redactor, call.handle)  # fmt: skip
            if refusal is not None:
                raise refusal
            await self._wait_for_rate(call.run, call.entry)
            recorded = await self._approved_before(call)
            if recorded is not None:  # the approved call already ran (a second retry): never again
                if isinstance(recorded, HostCallError):
                    raise recorded
                self._end(call, text=recorded)
                return recorded
            if call.kind in resources.OPERATIONS:
                answer = await self.pool.request(call.entry.server_id, f"asking {call.entry.tool_name}",
                                                 lambda client: resources.send(client, call.kind, call.arguments,
                                                                               MAX_LIST_PAGES),
                                                 call.run.remaining())  # fmt: skip
            else:
                result = await self.pool.call_tool(call.entry.server_id, call.entry.tool_name, call.arguments,
                                                   call.run.remaining())  # fmt: skip
                answer = self._answer(call, result)
            answer = self._vault(call.run).scrub(answer, call.given)  # the code never sees PII (resources too)
            text = encode_payload(answer, f"the result of {call.entry.tool_name}")
            if call.shape is not None:  # written beside the answer, not before it (the file lock may wait)
                self._store_shape(call.entry, call.shape)
        except anyio.get_cancelled_exc_class():
            journal = call.run.journal
            if journal is not None and call.approval == "asked" and journal.paused_on is not None:
                call.approval = "paused"  # the run paused for this answer; a replay of it gets the call
            self._end(call, cancelled=True)
            raise
        except Exception as exc:
            error = mcp_errors.to_host_error(exc, call.entry.server_id, call.entry.tool_name, call.given.shown)
            error = self._scrubbed(call.run, error, call.given)
            if mcp_errors.schema_disagreement(error):
                self._forget(call.entry.server_id)  # the next run lists its tools again
            self._end(call, error=error, cancelled=isinstance(exc, mcp_errors.DeadlineReached))
            raise error from None
        self._end(call, text=text)
        return text

    def _store_shape(self, entry: ToolEntry, shape: dict[str, Any]) -> None:
        """Stores an observed shape off the event loop; best effort: a failure only warns."""

        def store() -> None:
            try:
                self.observed.store(self._key(entry.server_id), entry.tool_name, entry.digest, shape)
            except Exception as exc:  # never into the pool's task group, which would stop every connection
                self._warn(f"the shape of {entry.server_id}.{entry.tool_name}'s results was not kept: {exc}")

        try:
            self.pool.task_group.start_soon(functools.partial(anyio.to_thread.run_sync, store))
        except RuntimeError:  # the pool is closing: the shape is not worth keeping it open
            pass

    def _answer(self, call: _StartedCall, result: CallToolResult) -> Any:
        """What the guest gets: the whole result when it asked for it raw, else the unwrapped value
        (isError raises). A tool without an output schema has the shape of the value remembered."""
        raw = call.kind == "tool-raw"
        if result.is_error:
            if raw:
                return whole(result)
            raise mcp_errors.tool_error(result, call.given.shown)
        value = unwrap(result)
        if "outputSchema" not in call.entry.tool:
            call.shape = self.observed.update(self._key(call.entry.server_id), call.entry.tool_name,
                                              call.entry.digest, value)  # fmt: skip
        return whole(result) if raw else value

    def _vault(self, run: RunState) -> PiiVault:
        """The run's PII vault, made at its first call (every call of a run goes through this broker)."""
        if run.pii_vault is None:
            run.pii_vault = PiiVault(self.pii)
        vault: PiiVault = run.pii_vault
        return vault

    def _scrubbed(self, run: RunState, error: HostCallError, given: Given) -> HostCallError:
        """`error` without PII: a tool's error text, or a schema error's received values, may quote it."""
        vault = self._vault(run)
        if vault.active:
            error.message, error.hint, error.detail = vault.scrub([error.message, error.hint, error.detail], given)
        return error

    async def _wait_for_rate(self, run: RunState, entry: ToolEntry) -> None:
        delay = self._rates.delay(entry.server_id)
        if delay > run.remaining():
            raise HostCallError("limit-exceeded", f"server {entry.server_id!r} is rate-limited past the run's deadline",
                                "Make fewer calls to this server per run.", limit="tool_calls")  # fmt: skip
        if delay > 0:
            await anyio.sleep(delay)

    async def _approved_before(self, call: _StartedCall) -> str | HostCallError | None:
        """For the call a replay's user answered: records its start in the shared store before it runs
        (None: go ahead), or gives its recorded outcome; an error if a replica that died had started it."""
        journal = call.run.journal
        if journal is None or journal.guard is None or not journal.is_approved(call.handle):
            return None
        recorded = await anyio.to_thread.run_sync(journal.guard.before_call)
        if recorded is None:
            call.guarded = True
            return None
        if isinstance(recorded, str | HostCallError):
            call.recorded = True
            return recorded
        name = approval.visible(f"{call.entry.server_id}.{call.entry.tool_name}")
        return HostCallError(
            "unavailable", f"the approved call to {name} was started by a replica that stopped before recording "
            "how it ended: it may have run, so it is not run again",
            "Check whether it took effect, then call run_python again if it is still needed.",
        )  # fmt: skip

    def _end(
        self, call: _StartedCall, *, text: str = "", error: HostCallError | None = None, cancelled: bool = False
    ) -> None:
        """Writes the call's trace entry and audit line; a call the run already closed stays cancelled."""
        journal = call.run.journal
        if call.guarded and not cancelled and journal is not None and journal.guard is not None:
            try:
                journal.guard.after_call(error if error is not None else text)
            except Exception as exc:  # the outcome stands; only a later retry's takeover would miss it
                call.run.warnings.append(f"the approved call's outcome could not be recorded: {exc}")
        if journal is not None and journal.replay:
            extra: dict[str, Any] = {"replay_of": journal.origin}
            if call.recorded:
                extra["recorded"] = True  # answered from the record of an earlier retry: not called again
        else:
            extra = {}
        trace_error = CANCELLED if cancelled else None if error is None else f"{error.kind}: {error.message}"
        recorded = call.run.calls.record(call.handle, ok=trace_error is None, error=trace_error)
        outcome: str = "cancelled" if cancelled or not recorded else "ok" if error is None else error.kind
        if call.approval == "paused":  # not sent: the run ended to be replayed (2026-era approvals)
            outcome = "paused"
        self._audit(call.run, call.entry.server_id, call.entry.tool_name, call.arguments, outcome=outcome,
                    approval=call.approval, result_bytes=len(text.encode()), duration_ms=call.elapsed_ms(),
                    redactions=self.redactor.redact_text(text)[1] if text else 0, **extra)  # fmt: skip

    def _audit(self, run: RunState, server_id: str, tool_name: str, arguments: Any, **fields: Any) -> None:
        if self.audit is None:
            return
        if isinstance(arguments, dict):
            fields["argument_digest"] = digest(arguments)
        try:
            self.audit.write("tool_call", run_id=run.run_id, trace_id=run.trace_id, code_digest=run.code_digest,
                             server=server_id[:200], tool=tool_name[:200], **principal_field(run.principal),
                             **fields)  # fmt: skip
        except OSError as exc:  # auditing must not break the call; say so once per run
            run.warnings.append(f"the audit log could not be written: {exc}")


@dataclass
class _StartedCall:
    """One started call, as the event loop sees it until it ends."""

    run: RunState
    handle: int
    entry: ToolEntry
    arguments: dict[str, Any]
    given: Given
    """The real values put in place of tokens in `arguments`: what the call returns is scrubbed of them."""
    kind: CallKind = "tool"
    """What was asked: a tool's result unwrapped or whole ("tool-raw"), or a resource operation."""
    shape: dict[str, Any] | None = None
    """A new observed shape of the tool's results, to store once the answer is ready."""
    approval: str = "not_required"
    started: float = field(default_factory=time.monotonic)
    guarded: bool = False
    """The call a replay's user answered: its outcome goes to the shared store (`_approved_before`)."""
    recorded: bool = False
    """Its outcome came from that record (an earlier retry ran it)."""

    def elapsed_ms(self) -> float:
        return round((time.monotonic() - self.started) * 1000, 3)


def _text(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise HostCallError("invalid-argument", f"{key} must be a non-empty string")
    return value


def unwrap(result: CallToolResult) -> Any:
    """structuredContent if present; one text block → str; otherwise the whole result (wire form)."""
    from mcp.types import TextContent

    if result.structured_content is not None:
        return result.structured_content
    content = result.content
    if len(content) == 1 and isinstance(content[0], TextContent):
        return content[0].text
    return whole(result)


def whole(result: CallToolResult) -> dict[str, Any]:
    """The whole result in wire form: content blocks, structuredContent, isError (what ``raw=True`` gets)."""
    answer: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    answer.setdefault("isError", bool(result.is_error))
    answer.pop("resultType", None)  # the SDK's 2026-era plumbing ("complete"), not the tool's
    return answer


def _completed(run: RunState, handle: int, outcome: str | HostCallError) -> None:
    if run.journal is not None:
        run.journal.done(handle, outcome)
    run.complete(handle, outcome)


def _outcome(future: Future[str]) -> str | HostCallError:
    if future.cancelled():
        return HostCallError("limit-exceeded", "the call was cancelled because the run ended", limit="cancelled")
    error = future.exception()
    if error is None:
        return future.result()
    if isinstance(error, HostCallError):
        return error
    return internal_error(error)
