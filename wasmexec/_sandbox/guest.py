"""How a run drives one guest image: the only part of a run that differs between images.

The run frame (`wasmexec._sandbox.run`) is the same for both images: the Store, its
limits, output capture, the workspace, the deadline, fuel, closing, the run result. A
`Guest` says the rest: what the image adds to the WASI context, how to instantiate it,
how to hand it the code and get its report back, and how to warm a spare up
(`wasmexec._sandbox.spares`). The default image's is `ComponentGuest`; the science
image's is `wasmexec._science.guest.ScienceGuest`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from wasmtime import Engine, Store, WasiConfig

from wasmexec._sandbox.epoch import EpochTicker
from wasmexec._sandbox.report import GuestReport, parse_report


class Guest(Protocol):
    """One image in one limit mode (fuel on or off), ready to instantiate."""

    engine: Engine
    ticker: EpochTicker
    fuel: bool
    image: str
    """The image's ``sha256:`` identity (the run result's ``sandbox_image``)."""
    memory_floor_bytes: int
    """The least memory limit under which it can instantiate (0: no floor)."""
    run_options: dict[str, object]
    """What it adds to every run's options for the guest (a user profile: its packages)."""

    def configure(self, wasi: WasiConfig) -> None:
        """Adds what the image itself needs to the run's WASI context (the run adds its workspace)."""

    def instantiate(self, store: Store) -> Any:
        """A new instance of the image in `store`."""

    def invoke(self, store: Store, instance: Any, code: str, options_json: str, max_result_bytes: int) -> GuestReport:
        """Runs `code` in `instance` and parses the report the guest hands back.

        Raises:
            Exception: the guest trapped (a limit, the deadline) or failed on the host.
        """

    def warm(self, store: Store, instance: Any) -> bool:
        """Runs the image's fixed warm-up in `instance` (no user code); whether it went as it should."""


class GuestRuntime(Protocol):
    """What a run needs of a runtime: its image, and a `Guest` per limit mode."""

    @property
    def sandbox_image(self) -> str: ...

    def guest(self, fuel: bool) -> Guest: ...


@dataclass
class ComponentGuest:
    """The default image: a component exporting ``run(code, options-json) -> report`` and ``prepare``."""

    engine: Engine
    ticker: EpochTicker
    fuel: bool
    image: str
    component: Any
    linker: Any
    memory_floor_bytes: int = 0
    run_options: dict[str, object] = field(default_factory=dict)
    # The exports' indexes, looked up once in the component (not by name in every instance).
    _run_export: Any = field(init=False, repr=False)
    _prepare_export: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._run_export = self.component.get_export_index("run")
        self._prepare_export = self.component.get_export_index("prepare")

    def configure(self, wasi: WasiConfig) -> None:
        pass  # the component needs nothing but what the run gives it

    def instantiate(self, store: Store) -> Any:
        return self.linker.instantiate(store, self.component)

    def invoke(self, store: Store, instance: Any, code: str, options_json: str, max_result_bytes: int) -> GuestReport:
        run = instance.get_func(store, self._run_export) if self._run_export is not None else None
        assert run is not None, "the guest component exports no `run`"
        return parse_report(run(store, code, options_json), max_result_bytes)

    def warm(self, store: Store, instance: Any) -> bool:
        prepare = instance.get_func(store, self._prepare_export) if self._prepare_export is not None else None
        return prepare is not None and prepare(store) is True
