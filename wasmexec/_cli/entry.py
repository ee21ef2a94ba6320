"""The `wasmexec` process entry (the console script and ``python -m wasmexec``): the cyclic garbage
collector is off while the process starts (`wasmexec._cli.startup_gc` says why and when it comes back).
"""

from __future__ import annotations

from wasmexec._cli.startup_gc import hold


def main() -> int:
    """The console script's entry: `wasmexec._cli.main.main` with the collector held during the start."""
    hold()
    from wasmexec._cli.main import main as command_main

    return command_main()
