"""The `wasmexec` process entry (the console script and ``python -m wasmexec``): the cyclic garbage
collector is off while the process starts.

A `run` process imports about 200 modules (wasmtime-py's bindings and component types, ours) and
makes about 28,000 objects that live as long as it does; the collector scanned them again and again
while they were being made (about 50 collections, 10 ms of CPU in a 140 ms start: issue 19). So
`main` turns it off before importing anything, and `started()` turns it back on once the command
is set up, with what exists by then frozen (`gc.freeze`) so that later collections skip it. Only a
hold taken here is released here: a caller of `wasmexec._cli.main.main([...])` in its own
interpreter (the tests) keeps its collector as it was.
"""

from __future__ import annotations

import gc

_held = False


def main() -> int:
    """The console script's entry: `wasmexec._cli.main.main` with the collector held during the start."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True
    from wasmexec._cli.main import main as command_main

    return command_main()


def started() -> None:
    """The command is set up (its modules loaded): collect again, skipping everything made so far."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
