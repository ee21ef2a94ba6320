"""Run directories made ahead of time and removed after the run, off the run's critical path.

A run directory ``R`` (mode 0700) holds ``R/workspace`` and ``R/tmp``, the host side
of the guest's ``/workspace`` and ``/tmp``. Creating and removing one costs 150-200 µs
on ext4, more than everything else a workspace adds, so a few stand ready and a
reaper thread removes used ones (and makes new ones) after the result is built.

Every run gets directories no earlier run touched, even one that left them empty: their
times (``os.utime``), modes, inode numbers and sizes would otherwise carry a message from
one run (one client) to the next. They are handed out oldest first, so a run never gets a
directory made after an earlier run's were removed (which could reuse their inode numbers).
A warm spare instance (`wasmexec._sandbox.spares`) takes its run directory here too.
All of them live under one private base directory per pool, removed at exit.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wasmexec._process_default import process_default

#: Run directories kept ready: about the runs that start at once on a busy server.
DEFAULT_SPARES = 4


@dataclass
class RunDir:
    """One run's private directory and the two directories the guest sees."""

    root: Path
    workspace: Path
    tmp: Path


class RunDirPool:
    """Hands out fresh run directories and removes used ones on a reaper thread. Thread-safe."""

    def __init__(self, base: str | os.PathLike[str] | None = None, spares: int = DEFAULT_SPARES) -> None:
        """
        Args:
            base: an existing directory to hold the run directories; by default a private
                (0700) directory in the system's temp dir, made on first use, removed at exit.
            spares: run directories kept ready.
        """
        self._base = Path(base) if base is not None else None
        self._made_base = False
        self._spares = spares
        self._ready: list[RunDir] = []
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[tuple[RunDir, Callable[[], None] | None] | threading.Event | None] = (
            queue.SimpleQueue()
        )
        self._reaper: threading.Thread | None = None
        self._counter = 0
        self._removed = False

    def take(self) -> RunDir:
        """A run directory no run has used (made now when none is ready). Its caller `release`s it."""
        with self._lock:
            ready = self._ready.pop(0) if self._ready else None  # the oldest: see the module
            self._start_reaper()
        if ready is None:
            self._work.put(None)  # out of spares: make some for the next runs
            return self._make()
        return ready  # replaced when it is removed (`release`)

    def release(self, run_dir: RunDir, first: Callable[[], None] | None = None) -> None:
        """Removes `run_dir` soon, on the reaper thread (everything in it, symlinks never followed).

        `first` runs there before the removal: cleanup that must not delay the run's result
        (the quota removing its watches). Never handed out again.
        """
        with self._lock:
            self._start_reaper()
        self._work.put((run_dir, first))

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Waits until every directory released so far is removed; False on timeout."""
        done = threading.Event()
        with self._lock:
            self._start_reaper()
        self._work.put(done)
        return done.wait(timeout_s)

    @property
    def base(self) -> Path:
        """The directory that holds the run directories."""
        return self._base_dir()

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="wasmexec-workspace-reaper", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            item = self._work.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                if item is not None:
                    run_dir, first = item
                    if first is not None:
                        first()
                    _remove(run_dir)
                with self._lock:
                    missing = 0 if self._removed else self._spares - len(self._ready)
                for _ in range(missing):
                    made = self._make()
                    with self._lock:
                        self._ready.append(made)
            except Exception:  # a full disk: the next take() makes its own directory and reports the error
                pass

    def _make(self) -> RunDir:
        base = self._base_dir()
        with self._lock:
            self._counter += 1
            number = self._counter
        root = Path(tempfile.mkdtemp(prefix=f"run{number}-", dir=base))  # mode 0700
        workspace, tmp = root / "workspace", root / "tmp"
        os.mkdir(workspace, 0o700)
        os.mkdir(tmp, 0o700)
        return RunDir(root, workspace, tmp)

    def _base_dir(self) -> Path:
        with self._lock:
            if self._base is None:
                self._base = Path(tempfile.mkdtemp(prefix="wasmexec-runs-"))
                self._made_base = True
                atexit.register(shutil.rmtree, self._base, True)
            return self._base

    def keep(self, spares: int) -> None:
        """Keeps `spares` directories ready from now on, removing those beyond.

        `wasmexec run` keeps none: its one run would leave every spare to be removed at exit,
        which costs its start more than the spare saves (tens of ms of directory I/O).
        """
        with self._lock:
            self._spares = spares
            extra, self._ready = self._ready[spares:], self._ready[:spares]
        for run_dir in extra:
            shutil.rmtree(run_dir.root, ignore_errors=True)

    def close(self) -> None:
        """Removes the spares. Runs still using a directory keep it."""
        with self._lock:
            ready, self._ready = self._ready, []
        for run_dir in ready:
            shutil.rmtree(run_dir.root, ignore_errors=True)

    def remove(self, timeout_s: float = 10.0) -> None:
        """Removes every run directory and the default base, once the reaper has removed what it was given.

        For the end of the process (`wasmexec serve` stopping): the reaper makes no spares after this,
        and a directory released later is removed by the reaper as usual. Idempotent.
        """
        with self._lock:
            self._removed = True
            made = self._base if self._base is not None and self._made_base else None
        self.wait_idle(timeout_s)
        self.close()
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def _remove(run_dir: RunDir) -> None:
    """Removes a used run directory: three `rmdir`s when the run left it empty (most runs), else the walk."""
    try:
        for directory in (run_dir.workspace, run_dir.tmp, run_dir.root):
            os.rmdir(directory)  # never follows a symlink: one in the way fails it (ENOTDIR)
    except OSError:
        shutil.rmtree(run_dir.root, ignore_errors=True)  # fd-based: never follows a guest's symlink


#: The process's pool of run directories.
default_pool = process_default(RunDirPool)
