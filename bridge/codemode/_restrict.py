"""What cannot exist in the sandbox fails clearly: hints for what it lacks, a host-backed sleep.

Nothing is refused at import: the walls are WASI's (no sockets, no processes, no native code),
so `socket`, `subprocess` and the rest import as on CPython and their operations fail with an
`OSError` (as in Pyodide). The runner adds a hint from `HINTS` to such an error, and to the
`ImportError` of a module the build lacks. tests/security proves the walls.
"""

from __future__ import annotations

import io
import sys
import time

from codemode import _host

_NO_NETWORK = "The sandbox has no network: call the tools of configured MCP servers instead (codemode.discovery)."
_NO_PROCESSES = "The sandbox cannot start processes or threads: do the work in this run's Python code."
_NO_NATIVE = "Native code and foreign functions cannot be loaded in the sandbox."
_NO_TERMINAL = "The sandbox has no terminal or OS handles."

#: Modules whose use (or import, where the build lacks them) hits a wall of the sandbox: the hint to give.
HINTS: dict[str, str] = {
    "socket": _NO_NETWORK,
    "_socket": _NO_NETWORK,
    "ssl": _NO_NETWORK,
    "_ssl": _NO_NETWORK,
    "select": _NO_NETWORK,
    "selectors": _NO_NETWORK,
    "socketserver": _NO_NETWORK,
    "http.client": _NO_NETWORK,
    "http.server": _NO_NETWORK,
    "urllib.request": _NO_NETWORK,
    "xmlrpc.client": _NO_NETWORK,
    "xmlrpc.server": _NO_NETWORK,
    "smtplib": _NO_NETWORK,
    "ftplib": _NO_NETWORK,
    "imaplib": _NO_NETWORK,
    "poplib": _NO_NETWORK,
    "subprocess": _NO_PROCESSES,
    "_posixsubprocess": _NO_PROCESSES,
    "multiprocessing": _NO_PROCESSES,
    "_multiprocessing": _NO_PROCESSES,
    "concurrent.futures": _NO_PROCESSES,
    "threading": _NO_PROCESSES,
    "_thread": _NO_PROCESSES,
    "pty": _NO_PROCESSES,
    "webbrowser": _NO_PROCESSES,
    "ctypes": _NO_NATIVE,
    "_ctypes": _NO_NATIVE,
    "cffi": _NO_NATIVE,
    "mmap": _NO_NATIVE,
    "readline": _NO_TERMINAL,
    "curses": _NO_TERMINAL,
    "_curses": _NO_TERMINAL,
    "termios": _NO_TERMINAL,
    "tkinter": _NO_TERMINAL,
    "_tkinter": _NO_TERMINAL,
    "resource": _NO_TERMINAL,
}


def hint_for(module_name: str | None) -> str | None:
    """The hint for a module (or a submodule of one) that meets a wall of the sandbox, else None."""
    while module_name:
        if module_name in HINTS:
            return HINTS[module_name]
        module_name = module_name.rpartition(".")[0]
    return None


def buffer_stdio() -> None:
    """Line-buffered stdout/stderr over a BufferedWriter.

    The stock streams write straight to WASI, which takes at most 8 KiB per write
    and reports short writes that the unbuffered stream ignores: long prints were
    silently cut. A BufferedWriter retries until every byte is written.
    """
    for name, fd in (("stdout", 1), ("stderr", 2)):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True)  # fmt: skip
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def install() -> None:
    """Waits go through the host, which honours the run's deadline (a WASI sleep would not)."""
    time.sleep = _host.sleep
