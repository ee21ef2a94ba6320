"""The workspace limits enforced while the guest runs, checked on every epoch tick.

WASI file operations cannot be intercepted (shadowing any `wasi:filesystem` function
replaces the whole instance), so the host watches the directories instead. With
inotify, a check reads the queued events and re-stats only the entries they name,
keeping running totals: a few µs per tick. The watches live in the process's one shared
inotify instance (`inotify.subscribe`): a quota adds its own and removes them when it closes.
Without inotify (not Linux, or the per-user instance or watch limit reached) each check
walks the whole workspace, and checks are spaced out when a walk takes more than
`SCAN_BUDGET_S` so they cost at most about 10% of the run.

Bytes are charged ``max(st_size, st_blocks * 512)`` per inode (a sparse file by its size,
hard links once), over /workspace and /tmp together; every file, directory and symlink
counts towards the entry limit. Every walk is fd-relative and never follows a symlink,
and stops one entry past the limit.

A file the guest still holds open after its last name went keeps using disk and is in no
directory, however the name went: unlinked, renamed over, its hard links removed one by one,
its directory removed, a name used again. So whenever an inode leaves the counted tree (its
last path forgotten, or a path now names another inode), a name the events mention cannot be
stat'ed, a charged descriptor is closed, or the tree is walked again (every check without
inotify), the check ends with one look among this process's open descriptors (wasmtime opens
the guest's files) for regular files below the roots with no link left, and charges each such
inode (by device and inode number, never by name) while it stays open. The look lists
/proc/self/fd: at most once per check. (Linux only; elsewhere such a file is not seen until it
is closed.)

Overshoot: a stream write is at most 64 KiB per WASI call and the check runs every tick,
so the cap is passed by at most one tick of writing. One exception: ``os.pwrite`` is a
single WASI call of up to ``min(memory_mb, 128 MiB)``; the check right after it fails the run.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Sequence

from wasmexec._envelope import StopReason
from wasmexec._workspace import inotify, safefs
from wasmexec._workspace.inotify import Subscription

#: A fallback walk this long or shorter runs on every tick; a longer one is spaced out to about 10%.
SCAN_BUDGET_S = 0.001

Key = tuple[int, tuple[str, ...]]
"""(index of the root, path below it)."""
Inode = tuple[int, int]


class Quota:
    """Counts what one run holds in its roots (/workspace, /tmp) and says when it passes a limit.

    `check` is called from the epoch deadline callback, on the run's thread: it never raises.
    """

    def __init__(
        self,
        roots: Sequence[int],
        max_bytes: int,
        max_entries: int,
        scan_budget_s: float = SCAN_BUDGET_S,
    ) -> None:
        """
        Args:
            roots: descriptors of the directories to count (kept open by the caller).
            max_bytes: the byte limit; max_entries: the entry limit.
            scan_budget_s: without inotify, a walk slower than this spaces the next walks out.
        """
        self._roots = list(roots)
        self._scan_budget_s = scan_budget_s
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._tree_bytes = 0
        self._tree_entries = 0
        self._paths: dict[Key, Inode] = {}
        self._inodes: dict[Inode, list[int]] = {}  # inode -> [charge, paths]
        self._dirs: dict[int, Key] = {}  # watch descriptor -> directory
        self._orphans: dict[Inode, tuple[int, int]] = {}  # deleted while open: inode -> (descriptor, charge)
        self._root_paths: tuple[str, ...] | None = None
        self._look_for_orphans = False  # something may have left the tree while open: look at the check's end
        self._watcher: Subscription | None = None
        self._skip = 0

    # -- life cycle ------------------------------------------------------------------------
    def start(self) -> StopReason | None:
        """Counts what the roots hold now and starts watching; a reason if that is already over a limit."""
        try:
            self._watcher = inotify.subscribe()
        except OSError:
            self._watcher = None  # scan on every check instead
        self._rescan()
        self._look_for_orphans = False  # nothing of this run is open yet
        return self._verdict()

    def close(self) -> None:
        """Stops watching: removes this quota's watches from the shared instance. Idempotent."""
        self._drop_watcher()

    @property
    def bytes(self) -> int:
        """Bytes charged now (see the module)."""
        return self._tree_bytes + sum(charge for _, charge in self._orphans.values())

    @property
    def entries(self) -> int:
        """Files, directories and symlinks counted now (deleted files still open included)."""
        return self._tree_entries + len(self._orphans)

    @property
    def watching(self) -> bool:
        """Whether inotify is in use (else every check walks the roots)."""
        return self._watcher is not None

    # -- checks ----------------------------------------------------------------------------
    def check(self) -> StopReason | None:
        """The epoch callback's question: a workspace limit passed since the last check, or None."""
        try:
            began: float | None = None
            if self._watcher is not None:
                self._apply_events(self._watcher)
            elif self._skip > 0:
                self._skip -= 1
                return None
            else:
                began = time.perf_counter()
                self._rescan()  # no events say what left the tree here: it looks every time
            if self._orphans:
                self._refresh_orphans()
            if self._look_for_orphans:
                self._find_orphans()  # once per check, however many inodes left the tree
            if began is not None:
                cost = time.perf_counter() - began
                self._skip = 0 if cost <= self._scan_budget_s else int(cost / self._scan_budget_s)
            return self._verdict()
        except Exception:  # a vanished root, a full table: walk everything on the next check
            self._drop_watcher()
            return None

    def _verdict(self) -> StopReason | None:
        if self.entries > self.max_entries:
            return "workspace_files"
        if self.bytes > self.max_bytes:
            return "workspace_bytes"
        return None

    # -- full walk -------------------------------------------------------------------------
    def _rescan(self) -> None:
        self._paths.clear()
        self._inodes.clear()
        self._dirs.clear()
        self._tree_bytes = self._tree_entries = 0
        for index, root in enumerate(self._roots):
            self._walk(index, root, ())
        self._look_for_orphans = True  # what left the tree since the last count is not known

    def _walk(self, index: int, dir_fd: int, prefix: tuple[str, ...]) -> None:
        """Counts everything below `dir_fd` (the directory `prefix` of root `index`), watching each directory."""

        def watch(path: tuple[str, ...], fd: int) -> None:
            if self._watcher is not None:
                try:
                    self._dirs[self._watcher.watch_fd(fd)] = (index, path)
                except OSError:  # ENOSPC: out of watches; walk on every check from now on
                    self._drop_watcher()

        left = self.max_entries - self._tree_entries
        for path, info in safefs.walk(dir_fd, max(left, 0), prefix, watch):
            self._record((index, path), info)

    def _record(self, key: Key, info: os.stat_result) -> None:
        self._forget(key)
        inode = (info.st_dev, info.st_ino)
        self._paths[key] = inode
        self._tree_entries += 1
        known = self._inodes.get(inode)
        charge = safefs.charge(info)
        if known is None:
            self._inodes[inode] = [charge, 1]
            self._tree_bytes += charge
        else:
            self._tree_bytes += charge - known[0]
            known[0] = charge
            known[1] += 1

    def _forget(self, key: Key) -> Inode | None:
        inode = self._paths.pop(key, None)
        if inode is None:
            return None
        self._tree_entries -= 1
        known = self._inodes[inode]
        known[1] -= 1
        if known[1] == 0:  # its last name here went: it may still be open
            del self._inodes[inode]
            self._tree_bytes -= known[0]
            self._look_for_orphans = True
            return inode
        return None

    # -- inotify ---------------------------------------------------------------------------
    def _apply_events(self, watcher: Subscription) -> None:
        touched: dict[Key, None] = {}
        rescan = False
        for wd, mask, name in watcher.events():
            if mask & inotify.IN_Q_OVERFLOW or mask & (inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF):
                rescan = True
            elif mask & inotify.IN_IGNORED:
                self._dirs.pop(wd, None)
            elif mask & inotify.IN_ISDIR and mask & (inotify.IN_MOVED_FROM | inotify.IN_MOVED_TO):
                rescan = True  # every path below the moved directory changed
            elif wd in self._dirs and name:
                index, parent = self._dirs[wd]
                touched[(index, (*parent, name))] = None
        if rescan:
            self._rescan()
            return
        for key in touched:
            self._restat(key)

    def _restat(self, key: Key) -> None:
        index, path = key
        try:
            with safefs.opened_dir(self._roots[index], path[:-1]) as parent:
                info = os.stat(path[-1], dir_fd=parent, follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode) and key not in self._paths:
                    self._record(key, info)
                    child = os.open(path[-1], safefs.DIR_FLAGS, dir_fd=parent)
                    try:
                        self._walk(index, child, path)
                    finally:
                        os.close(child)
                    return
        except OSError:
            # Gone: deleted, or written to after its deletion (inotify still names it), whether the
            # name was counted or came and went between two checks. Such a file keeps using disk
            # while it is open.
            self._forget(key)
            self._look_for_orphans = True
            return
        self._record(key, info)

    def _drop_watcher(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    # -- deleted files still open ----------------------------------------------------------
    def _find_orphans(self) -> None:
        """Finds every file below the roots that is open with no link left: this process's descriptors
        (wasmtime holds the guest's files) whose target is below a root, one per inode."""
        self._look_for_orphans = False
        prefixes = self._prefixes()
        found: dict[Inode, tuple[int, int]] = {}
        try:
            names = os.listdir("/proc/self/fd")
        except OSError:
            return  # no /proc: such files are seen when they are closed
        for name in names:
            with contextlib.suppress(OSError, ValueError):
                target = os.readlink(f"/proc/self/fd/{name}")
                if not target.endswith(" (deleted)") or not target.startswith(prefixes):
                    continue
                info = os.fstat(int(name))
                if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
                    found[(info.st_dev, info.st_ino)] = (int(name), safefs.charge(info))
        self._orphans = found

    def _prefixes(self) -> tuple[str, ...]:
        if self._root_paths is None:
            paths = []
            for root in self._roots:
                with contextlib.suppress(OSError):
                    paths.append(os.readlink(f"/proc/self/fd/{root}").rstrip("/") + "/")
            self._root_paths = tuple(paths)
        return self._root_paths

    def _refresh_orphans(self) -> None:
        """Brings the charges of deleted-but-open files up to date, and drops the closed ones."""
        for inode, (fd, _) in list(self._orphans.items()):
            try:
                info = os.fstat(fd)
            except OSError:
                info = None
            if info is None or (info.st_dev, info.st_ino) != inode or info.st_nlink > 0:
                del self._orphans[inode]  # closed (or linked again: then the tree counts it)
                self._look_for_orphans = True  # another descriptor may still hold it
            else:
                self._orphans[inode] = (fd, safefs.charge(info))
