"""An asyncio event loop that waits through the host.

The stock loop needs a self-pipe socket, which WASI lacks. This loop has no file
descriptors at all: its "selector" blocks in the host's `wait`, which finishes
tool calls started with `start-call` and honours the run's deadline.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.events
import math
from typing import Any

from codemode import _host
from codemode._host import Ok

_FOREVER_MS = 2**32 - 1


class _HostSelector:
    """Stands in for a selector: `select` waits on the host for pending calls or time."""

    def __init__(self, loop: SandboxEventLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        pending = self._loop._host_calls
        if timeout is None:
            if not pending:
                raise RuntimeError(
                    "event loop deadlock: every task is waiting and nothing can wake them "
                    "(no tool call is running and no timer is set)"
                )
            timeout_ms = _FOREVER_MS
        else:
            timeout_ms = math.ceil(max(timeout, 0.0) * 1000)
        if not pending and timeout_ms == 0:
            return []
        for completion in _host.wait(list(pending), timeout_ms):
            future = pending.pop(completion.handle, None)
            if future is None or future.done():
                continue
            outcome = completion.outcome
            if isinstance(outcome, Ok):
                future.set_result(outcome.value)
            else:
                future.set_exception(_host.to_exception(outcome.value))
        return []

    def close(self) -> None:
        pass


class SandboxEventLoop(asyncio.base_events.BaseEventLoop):
    """The event loop of every run: asyncio.run, gather, sleep and tool calls work."""

    def __init__(self) -> None:
        super().__init__()
        self._host_calls: dict[int, asyncio.Future[str]] = {}
        self._selector = _HostSelector(self)

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def watch_host_call(self, handle: int) -> asyncio.Future[str]:
        """Returns a future that resolves with the JSON text of the call's outcome."""
        future: asyncio.Future[str] = self.create_future()
        self._host_calls[handle] = future
        return future


# Renamed with a leading underscore in 3.14, when event loop policies were deprecated.
_policy_base: Any = getattr(asyncio.events, "_BaseDefaultEventLoopPolicy", None)
_policy_base = _policy_base or asyncio.events.BaseDefaultEventLoopPolicy


class _SandboxPolicy(_policy_base):  # type: ignore[misc]
    _loop_factory = SandboxEventLoop


def install() -> None:
    """Makes `asyncio.new_event_loop` (and so `asyncio.run`) build a SandboxEventLoop."""
    setter = getattr(asyncio.events, "_set_event_loop_policy", None) or asyncio.set_event_loop_policy
    setter(_SandboxPolicy())
