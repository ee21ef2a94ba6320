"""The cyclic garbage collector held off while a `wasmexec` process starts (`hold`, `started`).

A `run` process imports about 200 modules (wasmtime-py's bindings and component types, ours) and
makes about 28,000 objects that live as long as it does; the collector scanned them again and again
while they were being made (about 50 collections, 10 ms of CPU in a 140 ms start: issue 19). So the
process entry (`wasmexec._cli.entry`) calls `hold` before importing anything, and `started()` turns
the collector back on once the command is set up, with what exists by then frozen (`gc.freeze`) so
that later collections skip it. Only a hold taken here is released here: a caller of
`wasmexec._cli.main.main([...])` in its own interpreter (the tests) keeps its collector as it was.
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """Turns the collector off until `started` (if it is on: a hold is only released by whoever took it)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def started() -> None:
    """The command is set up (its modules loaded): collect again, skipping everything made so far."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
