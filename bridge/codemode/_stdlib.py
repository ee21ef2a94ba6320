"""The standard library in the default image: all of it, imported at build time, but what cannot exist.

The default image has no standard-library directory at run time: a module exists only if the
pre-initialization imported it (componentize-py snapshots the interpreter after the app's top
level ran). `import_all` imports every module of ``sys.stdlib_module_names`` and every
submodule of theirs, except `UNAVAILABLE` (the list docs/stdlib.md gives, one reason each; a
test compares the two). Modules whose import does something visible (``this`` prints, and
``antigravity`` opens a browser) are kept as code and run when a run imports them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import pkgutil
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType
from typing import ClassVar

_BZ2_LZMA = "needs libbz2/liblzma compiled for wasm32-wasi, which this CPython build lacks (docs/stdlib.md)"
_ZSTD = "needs libzstd compiled for wasm32-wasi, which this CPython build lacks"
_NATIVE = "loads native code and foreign functions; WebAssembly has none to load"
_TERMINAL = "needs a terminal; the sandbox has none"
_TK = "needs Tk and a display; the sandbox has neither"
_WINDOWS = "Windows only"
_PROCESSES = "needs processes or threads; the sandbox has neither (do the work in the run's own code)"
_POSIX = "a POSIX facility WASI does not have"

#: Standard-library modules that cannot be imported in the default image, and why.
UNAVAILABLE: dict[str, str] = {
    "bz2": _BZ2_LZMA,
    "_bz2": _BZ2_LZMA,
    "lzma": _BZ2_LZMA,
    "_lzma": _BZ2_LZMA,
    "_zstd": _ZSTD,
    "ctypes": _NATIVE,
    "_ctypes": _NATIVE,
    "curses": _TERMINAL,
    "_curses": _TERMINAL,
    "_curses_panel": _TERMINAL,
    "readline": _TERMINAL,
    "termios": _TERMINAL,
    "tty": _TERMINAL,
    "pty": _TERMINAL,
    "_dbm": "needs the ndbm C library; dbm uses dbm.sqlite3 or dbm.dumb instead",
    "_gdbm": "needs the gdbm C library; dbm uses dbm.sqlite3 or dbm.dumb instead",
    "_hashlib": "OpenSSL's hashes; hashlib uses its built-in md5, sha1, sha2, sha3 and blake2 instead",
    "_ssl": "needs OpenSSL and a network; the sandbox has no network",
    "ssl": "needs OpenSSL and a network; the sandbox has no network",
    "_uuid": "libuuid; uuid uses its pure-Python code instead",
    "_interpreters": _PROCESSES,
    "_interpqueues": _PROCESSES,
    "_interpchannels": _PROCESSES,
    "_multiprocessing": _PROCESSES,
    "_posixshmem": _PROCESSES,
    "_posixsubprocess": _PROCESSES,
    "_remote_debugging": "inspects other processes; the sandbox has none",
    "mmap": "WASI has no memory mapping",
    "fcntl": _POSIX,
    "grp": _POSIX,
    "pwd": _POSIX,
    "resource": _POSIX,
    "syslog": _POSIX,
    "_tkinter": _TK,
    "tkinter": _TK,
    "turtle": _TK,
    "turtledemo": _TK,
    "idlelib": _TK,
    "_overlapped": _WINDOWS,
    "_winapi": _WINDOWS,
    "_wmi": _WINDOWS,
    "msvcrt": _WINDOWS,
    "nt": _WINDOWS,
    "winreg": _WINDOWS,
    "winsound": _WINDOWS,
    "_scproxy": "macOS only",
}

#: Submodules left out: they import an unavailable module above, or are for another platform.
_UNAVAILABLE_SUBMODULES = (
    "_pyrepl.fancy_termios", "_pyrepl.readline", "_pyrepl.simple_interact", "_pyrepl.unix_console",
    "_pyrepl.unix_eventqueue", "_pyrepl.windows_console", "asyncio.tools", "asyncio.windows_events",
    "asyncio.windows_utils", "compression.bz2", "compression.lzma", "compression.zstd",
    "concurrent.futures.interpreter", "concurrent.interpreters", "dbm.gnu", "dbm.ndbm", "encodings.bz2_codec",
    "encodings.mbcs", "encodings.oem", "multiprocessing.forkserver", "multiprocessing.heap",
    "multiprocessing.popen_fork", "multiprocessing.popen_forkserver", "multiprocessing.popen_spawn_posix",
    "multiprocessing.popen_spawn_win32", "multiprocessing.resource_tracker", "multiprocessing.shared_memory",
    "multiprocessing.sharedctypes", "multiprocessing.synchronize",
)  # fmt: skip

#: Modules whose import has an effect a run should see: kept as code, run when imported.
_RUN_ON_IMPORT = ("this", "antigravity")


def reason(module_name: str | None) -> str | None:
    """Why a standard-library module (or a submodule of one) is not in the sandbox, else None."""
    while module_name:
        if module_name in UNAVAILABLE:
            return UNAVAILABLE[module_name]
        module_name = module_name.rpartition(".")[0]
    return None


def import_all() -> None:
    """Imports the whole standard library but `UNAVAILABLE` (build time only: about 500 modules).

    An import that fails here fails the build: a module missing from the image must be in the
    list above, with its reason, not dropped silently.
    """
    for name in sorted(sys.stdlib_module_names):
        if name in UNAVAILABLE:
            continue
        if name in _RUN_ON_IMPORT:
            _CodeFinder.keep(name)
            continue
        module = importlib.import_module(name)
        for submodule in _submodules(module):
            importlib.import_module(submodule)
    sys.meta_path.append(_CodeFinder())


def _submodules(package: ModuleType) -> list[str]:
    path = getattr(package, "__path__", None)
    if path is None:
        return []
    found = []
    for info in pkgutil.iter_modules(path, package.__name__ + "."):
        if info.name.endswith(".__main__") or info.name in _UNAVAILABLE_SUBMODULES:
            continue  # a __main__ runs its command line when imported
        found.append(info.name)
        if info.ispkg:
            found.extend(_submodules(importlib.import_module(info.name)))
    return found


class _CodeFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the `_RUN_ON_IMPORT` modules from their code objects, kept at build time."""

    _code: ClassVar[dict[str, CodeType]] = {}

    @classmethod
    def keep(cls, name: str) -> None:
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        code = loader.get_code(name) if isinstance(loader, importlib.abc.InspectLoader) else None
        if code is None:
            raise ImportError(f"no code for {name}", name=name)
        cls._code[name] = code

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._code:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin="<stdlib>")

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(self._code[module.__name__], module.__dict__)
