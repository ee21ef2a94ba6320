"""Prometheus metrics of one server, exposed at ``GET /metrics`` by `serve --http`.

Each server has its own `CollectorRegistry` (never the process-global one), so two
servers in one process, or tests, never share counts. Labels take only values the
host chooses: outcomes and limit names from fixed sets, server ids from the config
(a call to a server that is not configured counts as ``other``), so a hostile run
cannot grow the number of series.

================================== ========= ============================================
metric                             labels    meaning
================================== ========= ============================================
wasmexec_runs_total                outcome   runs ended: ok, error, limit, cancelled, internal
wasmexec_run_duration_seconds      —         histogram of run durations
wasmexec_limit_hits_total          limit     runs stopped by a limit (timeout, memory, …)
wasmexec_tool_calls_total          server,   tool calls from runs (outcome ok or error)
                                   outcome
wasmexec_runs_in_flight            —         runs executing now
wasmexec_runs_queued               —         admitted runs waiting for a slot
wasmexec_breaker_state             server,   1 for each server's breaker state (closed,
                                   state     half_open, open), 0 for the others
wasmexec_sampling_calls_total      outcome   ``codemode.llm`` calls, from each run's tool_trace
wasmexec_profile_ready             profile   1 for each guest image served (each is loaded
                                             before the server listens)
wasmexec_profile_runs_total        profile   runs ended, by the guest image they ran in
wasmexec_spare_takes_total         outcome   runs that could use a warm spare: hit (took one) or
                                             miss (made their own instance)
wasmexec_spares_ready              —         warm spares ready now
================================== ========= ============================================
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, get_args

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from wasmexec._envelope import LimitName, RunResult
from wasmexec._runctx.llm_ask import trace_outcome
from wasmexec._server.admission import Admission

if TYPE_CHECKING:
    from wasmexec._sandbox.spares import SpareStats

#: Run durations: from a bare expression (milliseconds) to the longest timeouts.
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BREAKER_STATES = ("closed", "half_open", "open")
#: Outcomes of a sampling call, for `count_sampling`.
SAMPLING_OUTCOMES = ("ok", "error", "unavailable", "over_cap")
OTHER_SERVER = "other"

_LIMITS = frozenset(get_args(LimitName))


class RunMetrics:
    """The counters, histogram and gauges of one server, in their own registry."""

    def __init__(
        self,
        admission: Admission,
        servers: Collection[str] = (),
        breaker_states: Callable[[], dict[str, str]] | None = None,
        profiles: Mapping[str, str] | None = None,
        spares: Callable[[], SpareStats] | None = None,
    ) -> None:
        """
        Args:
            admission: read for the in-flight and queued gauges at each scrape.
            servers: the configured server ids (the only values of the ``server`` label).
            breaker_states: server id → breaker state, read at each scrape.
            profiles: the profiles served → their ``sandbox_image`` (the only values of the ``profile`` label).
            spares: the sandbox's warm spare counts (`Spares.stats`), read at each scrape.
        """
        self.registry = CollectorRegistry()
        self._servers = frozenset(servers)
        self._profile_of_image = {image: profile for profile, image in (profiles or {}).items()}
        registry = self.registry
        self.runs = Counter("wasmexec_runs", "Runs ended, by outcome.", ["outcome"], registry=registry)
        self.duration = Histogram("wasmexec_run_duration_seconds", "How long runs took.", buckets=DURATION_BUCKETS_S,
                                  registry=registry)  # fmt: skip
        self.limit_hits = Counter("wasmexec_limit_hits", "Runs stopped by a limit, by limit.", ["limit"],
                                  registry=registry)  # fmt: skip
        self.tool_calls = Counter("wasmexec_tool_calls", "Tool calls made by runs, by server and outcome.",
                                  ["server", "outcome"], registry=registry)  # fmt: skip
        self.sampling_calls = Counter("wasmexec_sampling_calls", "Sampling calls (codemode.llm) made by runs.",
                                      ["outcome"], registry=registry)  # fmt: skip
        in_flight = Gauge("wasmexec_runs_in_flight", "Runs executing now.", registry=registry)
        in_flight.set_function(lambda: admission.running)
        queued = Gauge("wasmexec_runs_queued", "Admitted runs waiting for a slot.", registry=registry)
        queued.set_function(lambda: admission.queued)
        if breaker_states is not None:
            registry.register(_BreakerCollector(breaker_states))
        ready = Gauge("wasmexec_profile_ready", "Guest images served (1 each).", ["profile"], registry=registry)
        for profile in profiles or {}:
            ready.labels(profile=profile).set(1)
        self.profile_runs = Counter("wasmexec_profile_runs", "Runs ended, by guest image.", ["profile"],
                                    registry=registry)  # fmt: skip
        if spares is not None:
            registry.register(_SpareCollector(spares))

    def observe_run(self, result: RunResult | BaseException) -> None:
        """Counts one ended run (the admission's observer)."""
        if isinstance(result, BaseException):
            self.runs.labels(outcome="internal").inc()
            return
        limit = next((d.get("limit") for d in result["diagnostics"] if d.get("code") == "SANDBOX_LIMIT"), None)
        if result["result"]["ok"]:
            outcome = "ok"
        elif limit == "cancelled":
            outcome = "cancelled"
        elif limit is not None:
            outcome = "limit"
        elif any(d.get("code") == "INTERNAL_ERROR" for d in result["diagnostics"]):
            outcome = "internal"
        else:
            outcome = "error"
        self.runs.labels(outcome=outcome).inc()
        profile = self._profile_of_image.get(str(result.get("sandbox_image")))
        if profile is not None:
            self.profile_runs.labels(profile=profile).inc()
        self.duration.observe(max(0.0, float(result["duration_ms"])) / 1000)
        if limit is not None and limit != "cancelled" and limit in _LIMITS:
            self.limit_hits.labels(limit=limit).inc()
        for call in result["tool_trace"]:
            sampled = trace_outcome(call)
            if sampled is not None:  # a codemode.llm call, not a tool's
                self.count_sampling(sampled)
                continue
            server = call["server_id"] if call["server_id"] in self._servers else OTHER_SERVER
            self.tool_calls.labels(server=server, outcome="ok" if call["ok"] else "error").inc()

    def count_sampling(self, outcome: str) -> None:
        """Counts one sampling call; `outcome` is one of `SAMPLING_OUTCOMES` (anything else counts as error)."""
        self.sampling_calls.labels(outcome=outcome if outcome in SAMPLING_OUTCOMES else "error").inc()

    def exposition(self) -> tuple[bytes, str]:
        """The registry in the Prometheus text format, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _BreakerCollector(Collector):
    """Reads the breakers at scrape time: their state lives in the pool, not in a counter."""

    def __init__(self, states: Callable[[], dict[str, str]]) -> None:
        self._states = states

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("wasmexec_breaker_state", "Circuit breaker state of each configured server.",
                                   labels=["server", "state"])  # fmt: skip
        for server, current in sorted(self._states().items()):
            for state in BREAKER_STATES:
                family.add_metric([server, state], 1.0 if state == current else 0.0)
        yield family


class _SpareCollector(Collector):
    """Reads the sandbox's spare counts at scrape time."""

    def __init__(self, stats: Callable[[], SpareStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        takes = CounterMetricFamily("wasmexec_spare_takes", "Runs that could use a warm spare, by outcome.",
                                    labels=["outcome"])  # fmt: skip
        takes.add_metric(["hit"], stats.hits)
        takes.add_metric(["miss"], stats.misses)
        yield takes
        yield GaugeMetricFamily("wasmexec_spares_ready", "Warm spares ready now.", value=stats.ready)
