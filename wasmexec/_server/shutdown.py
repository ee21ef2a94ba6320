"""How `wasmexec serve` stops: one path for SIGTERM and SIGINT, over stdio and over HTTP.

`serve_until_signalled` runs a transport until it ends by itself (the stdio client
closed stdin) or the first SIGTERM or SIGINT comes. Then:

0. over HTTP, SIGTERM first drains (`Drain`): the server takes no new run (a new call is
   refused as retryable, HTTP 503 with Retry-After, and ``/healthz`` answers 503
   ``draining``, so a proxy sends calls to another replica), while runs already in
   flight go on, their clients still connected (both eras: the transport runs on, and
   uvicorn's signal handling, which sse_starlette watches to close every SSE stream at
   once, is not used), until all have ended or the drain timeout passes. SIGINT (Ctrl-C
   at a terminal), a second signal during the drain, and SIGTERM over stdio (where the
   client that owns the process is the one stopping it) skip the drain or cut it short;
1. every run still going is stopped (`LiveRuns.stop_all`): a question it waits on (an approval,
   paused in the 2026 era or asked by elicitation in the 2025 era; a sampling request)
   is answered no, so a paused approval is audited as denied; the run is cancelled (the
   epoch interrupt stops a running guest within a tick, a host call at once); and the
   shutdown waits up to `STOP_GRACE_S` for each run to end. Each writes its audit line
   and gives back its run directory, and a client still connected gets its result
   (cancelled) while the transport still runs;
2. the transport stops: over HTTP the socket closes, open responses get `CLOSE_GRACE_S`
   to end and are closed after; over stdio the reader stops (`wasmexec._server.stdio`);
3. the CLI closes the sandboxes, the artifact store (its directory too), the broker (its
   tool servers end) and the run-directory pool, and exits 0.

Signals that come while stopping change nothing: every step is bounded. uvicorn's own
signal handling is not used: it re-raises the signal after its shutdown, so the default
action killed the process before any cleanup (exit status -15, artifacts and run
directories left in TMPDIR).

"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread

#: How long stopped runs get to end (audit line, result, directories) before the process goes on
#: without them: a guest stops within an epoch tick and a host call at once; a loaded two-core machine,
#: a tool server slow to notice a cancelled call and the result's artifacts fit well within this.
STOP_GRACE_S = 5.0
#: How long HTTP responses still open after the runs ended (a 2025-era SSE stream, a call waiting for an
#: elicitation answer that will not matter) may go on before they are closed: seconds (uvicorn's unit).
CLOSE_GRACE_S = 2
#: The signals that stop the server.
SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The signal that drains first: what an orchestrator sends (Kubernetes, Docker, systemd) and then waits.
DRAIN_SIGNAL = signal.SIGTERM
#: How long in-flight runs get to end by themselves on SIGTERM (`serve --drain-timeout`): as long as a run
#: with the default run timeout (30 s), and Kubernetes' default termination grace period.
DEFAULT_DRAIN_TIMEOUT_S = 30
#: How often a drain looks whether the runs have ended: a run's end is seen within this.
DRAIN_POLL_S = 0.05


@dataclass(frozen=True)
class Drain:
    """What a drain needs from the server (step 0 above)."""

    begin: Callable[[], None]
    """Stops taking new runs (`Admission.drain`)."""
    idle: Callable[[], bool]
    """Whether every run has ended (`LiveRuns.idle`)."""
    timeout_s: float
    """How long runs may go on by themselves; 0 skips the drain."""


async def serve_until_signalled(
    serve: Callable[[], Awaitable[None]],
    stop_runs: Callable[[], object],
    stop_transport: Callable[[], None] | None = None,
    drain: Drain | None = None,
) -> int | None:
    """Runs `serve` until it returns or a signal comes; then drains (SIGTERM), stops the runs, then the transport.

    Args:
        serve: the transport; returns when it has stopped.
        stop_runs: stops every run and waits (bounded) for them to end; called on a worker thread.
        stop_transport: asks `serve` to return soon (uvicorn's `should_exit`); None cancels it.
        drain: what SIGTERM does first; None stops at once.

    Returns:
        The signal that stopped the server, or None when the transport ended by itself.
    """
    received: int | None = None
    with anyio.open_signal_receiver(*SIGNALS) as signals:
        async with anyio.create_task_group() as group:

            async def transport() -> None:
                await serve()
                group.cancel_scope.cancel()  # also ends the wait for a signal

            group.start_soon(transport)
            async for signum in signals:
                received = signum
                print(f"wasmexec: stopping ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
                break
            if drain is not None and received == DRAIN_SIGNAL:
                await _drained(drain, signals)
            await anyio.to_thread.run_sync(stop_runs)  # the transport still runs: results reach their clients
            if stop_transport is None:
                group.cancel_scope.cancel()
            else:
                stop_transport()  # `transport` cancels the group once `serve` returns
    return received


async def _drained(drain: Drain, signals: AsyncIterator[int]) -> None:
    """Takes no new run, then waits until every run has ended, the timeout passes or another signal comes."""
    drain.begin()
    print(f"wasmexec: draining: no new runs; waiting up to {drain.timeout_s:g} s for the runs in flight "
          "(another signal stops them now)", file=sys.stderr, flush=True)  # fmt: skip
    with anyio.move_on_after(drain.timeout_s) as scope:
        async with anyio.create_task_group() as group:

            async def another_signal() -> None:
                async for _ in signals:
                    group.cancel_scope.cancel()

            group.start_soon(another_signal)
            while not drain.idle():
                await anyio.sleep(DRAIN_POLL_S)
            group.cancel_scope.cancel()
    if scope.cancelled_caught:
        print("wasmexec: the drain timed out; stopping the runs still going", file=sys.stderr, flush=True)


def ignore_signals() -> None:
    """From now on SIGTERM and SIGINT change nothing: the cleanup after serving is bounded."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
