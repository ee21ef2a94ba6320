"""``GET /healthz``: a cheap answer to "is this server up, and how loaded is it?".

It reads counters only (no connection is made, no lock is held for long) and tells
nothing secret: no config, no paths, no credentials; server ids appear only with
their breaker state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wasmexec._server.admission import Admission
from wasmexec._version import __version__


def health(
    admission: Admission,
    breaker_states: Callable[[], dict[str, str]] | None = None,
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
    replica: str | None = None,
) -> dict[str, Any]:
    """The health document: status, the replica's id, version, runs in flight and queued, breakers not
    closed, and the profiles served (`RunPythonServer.profile_states`: each loaded before the server
    listened).

    The status is ``draining`` once the server stops taking runs (HTTP answers it with 503, so a proxy
    or a readiness probe sends no more calls), ``busy`` when the next call would be refused as
    retryable, ``ok`` otherwise.
    """
    breakers = breaker_states() if breaker_states is not None else {}
    status = "draining" if admission.draining else "busy" if admission.full() else "ok"
    return {
        "status": status,
        **({"replica": replica} if replica is not None else {}),
        "version": __version__,
        "runs": {
            "in_flight": admission.running,
            "queued": admission.queued,
            "max_concurrent": admission.max_concurrent_runs,
            "max_queued": admission.max_queued_runs,
        },
        "breakers": {
            "open": sorted(s for s, state in breakers.items() if state == "open"),
            "half_open": sorted(s for s, state in breakers.items() if state == "half_open"),
        },
        "profiles": {name: dict(state) for name, state in (profiles or {}).items()},
    }
