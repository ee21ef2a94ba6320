"""What cannot exist in the sandbox fails clearly: blocked imports with hints, a host-backed sleep."""

from __future__ import annotations

import importlib.abc
import io
import sys
import time
from collections.abc import Sequence
from types import ModuleType

from codemode import _host

_NO_NETWORK = "The sandbox has no network: call the tools of configured MCP servers instead (codemode.discovery)."
_NO_PROCESSES = "The sandbox cannot start processes or threads: do the work in this run's Python code."
_NO_NATIVE = "Native code and foreign functions cannot be loaded in the sandbox."
_NOT_BUILT = "This module is not part of the sandbox's CPython build; use json, csv or zlib/gzip instead."
_NO_TERMINAL = "The sandbox has no terminal or OS handles."

BLOCKED: dict[str, str] = {
    "socket": _NO_NETWORK,
    "_socket": _NO_NETWORK,
    "ssl": _NO_NETWORK,
    "_ssl": _NO_NETWORK,
    "select": _NO_NETWORK,
    "subprocess": _NO_PROCESSES,
    "_posixsubprocess": _NO_PROCESSES,
    "multiprocessing": _NO_PROCESSES,
    "_multiprocessing": _NO_PROCESSES,
    "concurrent.futures.process": _NO_PROCESSES,
    "concurrent.futures.thread": _NO_PROCESSES,
    "pty": _NO_PROCESSES,
    "ctypes": _NO_NATIVE,
    "_ctypes": _NO_NATIVE,
    "cffi": _NO_NATIVE,
    "mmap": _NO_NATIVE,
    "sqlite3": _NOT_BUILT,
    "_sqlite3": _NOT_BUILT,
    "bz2": _NOT_BUILT,
    "_bz2": _NOT_BUILT,
    "lzma": _NOT_BUILT,
    "_lzma": _NOT_BUILT,
    "readline": _NO_TERMINAL,
    "curses": _NO_TERMINAL,
    "_curses": _NO_TERMINAL,
    "termios": _NO_TERMINAL,
    "tkinter": _NO_TERMINAL,
    "_tkinter": _NO_TERMINAL,
    "resource": _NO_TERMINAL,
    "webbrowser": _NO_PROCESSES,
}


class SandboxImportError(ModuleNotFoundError):
    """A module that cannot exist in the sandbox; ``hint`` says what to use instead."""

    def __init__(self, name: str, hint: str) -> None:
        super().__init__(f"No module named {name!r} in the sandbox. {hint}", name=name)
        self.hint = hint


def hint_for(module_name: str | None) -> str | None:
    """The hint for a blocked module (or a submodule of one), else None."""
    while module_name:
        if module_name in BLOCKED:
            return BLOCKED[module_name]
        module_name = module_name.rpartition(".")[0]
    return None


class _BlockedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        hint = hint_for(fullname)
        if hint is not None:
            raise SandboxImportError(fullname, hint)


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
    """Blocks the modules above, even those the stdlib imported during pre-init."""
    for name in list(sys.modules):
        if hint_for(name) is not None:
            del sys.modules[name]
    sys.meta_path.insert(0, _BlockedFinder())
    time.sleep = _host.sleep
