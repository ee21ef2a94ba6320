"""A guest instance in its own Store, made before its run is known and bound to that run later.

A fresh run makes one and binds it at once; a spare (`wasmexec._sandbox.spares`) is made
ahead of time, warmed up, and bound to a run when one takes it. What a Store fixes when
it is made (its WASI output callbacks, its deadline callback) therefore points at
switchable targets: until a run binds it, output goes nowhere and the deadline never
fires, so nothing the warm-up did can reach a run's logs or stop it. Binding sets
everything that belongs to the run: its fuel, its deadline decision and the epoch
deadline counted from now, its output capture.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from wasmtime import Store, WasiConfig

from wasmexec._limits import Limits
from wasmexec._sandbox import epoch as _epoch
from wasmexec._sandbox.guest import Guest
from wasmexec._sandbox.output import OutputCapture
from wasmexec._sandbox.report import GuestReport
from wasmexec._sandbox.stack import on_guest_stack

#: Fuel for a spare's warm-up (a fixed dummy takes well under 1% of it).
WARM_FUEL = 2_000_000_000
#: A warm-up still running after this long (only checked while other runs tick the epoch) is stopped.
WARM_TIMEOUT_S = 30.0


class Sink:
    """A WASI output callback whose destination is set later; without one, output is dropped."""

    __slots__ = ("target",)

    def __init__(self) -> None:
        self.target: Callable[[bytes], None] | None = None

    def write(self, chunk: bytes) -> None:
        target = self.target
        if target is not None:
            target(chunk)  # an OutputCapture stream: never raises


class Decision:
    """The Store's deadline decision, switched to the run's when it starts (it holds nothing of the
    Store: the epoch module keeps it until the Store is finalized, so it must not keep the Store alive)."""

    __slots__ = ("decide",)

    def __init__(self) -> None:
        self.decide: Callable[[], str | None] = _no_run_yet

    def __call__(self) -> str | None:
        return self.decide()


class LiveInstance:
    """A Store for one guest (instantiated now, or when the run starts), bound to a run by `start`."""

    def __init__(
        self,
        guest: Guest,
        memory_bytes: int,
        every_ticks: int = _epoch.CHECK_EVERY_TICKS,
        preopen: Callable[[WasiConfig], None] | None = None,
    ) -> None:
        """
        Args:
            guest: the image and limit mode.
            memory_bytes: the Store's memory limit.
            every_ticks: how often (in epoch ticks) the run's deadline decision is asked.
            preopen: adds the run's directories to the WASI context (a workspace).
        """
        self.guest = guest
        self.every_ticks = every_ticks
        self.stdout, self.stderr = Sink(), Sink()
        self._decision = Decision()
        store = Store(guest.engine)
        wasi = WasiConfig()  # no env, args or network; stdin reads as empty; files only as preopened
        wasi.stdout_custom = self.stdout.write
        wasi.stderr_custom = self.stderr.write
        guest.configure(wasi)
        if preopen is not None:
            preopen(wasi)
        store.set_wasi(wasi)
        store.set_limits(memory_size=memory_bytes)
        _epoch.watch_store(store, self._decision, every_ticks)
        self.store = store
        self.instance: Any = None

    def warm(self) -> bool:
        """Instantiates and runs the image's warm-up (off any run); whether the instance is fit to use."""
        deadline = time.monotonic() + WARM_TIMEOUT_S
        self._decision.decide = lambda: "timeout" if time.monotonic() > deadline else None
        if self.guest.fuel:
            self.store.set_fuel(WARM_FUEL)
        return on_guest_stack(self._warm)  # a run's own instance is used on its thread, see run.py

    def _warm(self) -> bool:
        self.instance = self.guest.instantiate(self.store)
        return self.guest.warm(self.store, self.instance)

    def start(self, limits: Limits, output: OutputCapture, decide: Callable[[], str | None]) -> None:
        """Binds the instance to a run: its fuel, its deadline from now on, its output."""
        if limits.fuel is not None:
            self.store.set_fuel(limits.fuel)
        self._decision.decide = decide
        self.store.set_epoch_deadline(self.every_ticks)
        self.stdout.target, self.stderr.target = output.stdout.write, output.stderr.write

    def invoke(self, code: str, options_json: str, max_result_bytes: int) -> GuestReport:
        """Runs the code (instantiating first if this is a fresh instance) and returns the guest's report."""
        if self.instance is None:
            self.instance = self.guest.instantiate(self.store)
        return self.guest.invoke(self.store, self.instance, code, options_json, max_result_bytes)

    def fuel_left(self) -> int:
        return self.store.get_fuel()

    def stop(self) -> None:
        """Unbinds the run (the guest has stopped: nothing more may reach the run's logs or state)."""
        self.stdout.target = self.stderr.target = None
        self._decision.decide = _no_run_yet

    def close(self) -> None:
        """Drops the instance. Never while the interpreter exits: WASI output callbacks finalized then
        crash the process from wasmtime's threads (spares are closed by an exit hook before that)."""
        self.stop()
        self.store.close()


def _no_run_yet() -> str | None:
    return None
