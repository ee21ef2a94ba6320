"""Warm spares: instances made ahead of time, off the caller's path, each used by one run and dropped.

A spare is a fresh instance in which no user code has run: made on a background thread,
warmed up by the image's fixed dummy (`Guest.warm`: the default image's ``prepare`` export,
the science image's warm-up ``turn``), kept until one run takes it, then closed with that
run. A run that finds none ready never waits: it makes its own instance, as without spares.
Every run therefore still starts from a pristine image; spares only move the instantiation
and the first touches of its pages (most of a trivial run's time) before the request.

The policy (measured with `benchmarks/bench_spares.py`; numbers in benchmarks/README.md):

- the next spare is ordered when a run ends, to be made in the gap before the next run; when runs
  come faster than that (the gaps between them are shorter than making a spare takes) and a core
  is idle, the moment
  a run takes one (or finds none), so it is made while that run goes on, on the other core, and
  runs back to back find one ready as often as making one keeps up (ordered at take always, the
  spare's making slowed every run down on a busy machine);
- one spare per kind of run (`SpareKey`: limit mode, memory limit, workspace shape) at first, more
  (up to the sandbox's `count`, the operator's ceiling) while runs keep finding none ready, fewer
  again while they leave spares unused; for at most `MAX_KEYS` kinds (the least recently used
  kind's spares are dropped);
- with no core left free by this process's runs in progress (`running`, counted against the cores
  the process may use; the load average lagged a minute behind and counted other processes' work,
  so spares stopped coming on a machine busy with other jobs) and runs too fast for a spare to be
  ready in time, three refills in four are skipped, as are all while other runs of the
  sandbox are still going: the spare would take CPU from them (measured: parallel runs lost a
  quarter of their throughput); the run that ends last orders it;
- a spare whose warm-up failed is discarded; all are closed before the interpreter exits
  (WASI output callbacks finalized at exit crash the process).

The same background thread closes used Stores (`close_later`), before it makes anything: a
Store's close (0.3 ms) is then off the run's path.

A caller that answers someone with the run's result (the MCP server) runs it under a `Hold`: what the
run orders as it ends (its Store's close, its workspace's removal: `after_answer`, its refill) waits
until the caller releases the hold once the answer is out, so that work does not take the cores and the
GIL from sending it (measured with the server over stdio at 5 ms gaps: p50 6.5 → 4.4 ms). A hold never
keeps work back longer than `MAX_HOLD_S`, released or not; a spare ordered at take (to overlap the run)
is never held.

One background thread serves the whole process; it holds each pool weakly, so a sandbox dropped
without `close` takes its spares with it.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from wasmexec._sandbox.stack import guest_thread

if TYPE_CHECKING:  # wasmtime is loaded when a spare is made, not when the CLI reads the bounds below
    from wasmexec._sandbox.guest import GuestRuntime
    from wasmexec._sandbox.instance import LiveInstance
    from wasmexec._workspace.rundir_pool import RunDir, RunDirPool

#: The most spares a sandbox keeps ready per kind of run by default: one, and a second while runs come
#: faster than one is made (two at all times made the measured latency worse: the refills competed with
#: the runs on a 2-core machine).
DEFAULT_SPARES = 2
#: The most a sandbox may keep per kind of run (an operator's ceiling on memory held idle).
MAX_SPARES = 8
#: Kinds of run (limit mode, memory limit, workspace shape) that keep spares at once.
MAX_KEYS = 4
#: Runs in a row that leave a spare unused before one fewer is kept.
_SHRINK_AFTER = 8
#: Kinds of run whose timing and wanted number of spares are kept (client-chosen limits make kinds: bounded).
_MAX_TIMED = 64
#: Weight of the newest sample in the moving averages of gaps between runs and of making a spare.
_SMOOTHING = 0.3
#: While runs come too fast and no core is free, one refill in this many is made anyway (the load may drop).
_PROBE_EVERY = 4
#: How long the exit hook waits for a spare being made to finish (then closes it).
_EXIT_WAIT_S = 10.0
#: The longest a `Hold` keeps a run's background work back (its answer normally goes out within a millisecond;
#: a client that stops reading must not keep used Stores open and spares unmade).
MAX_HOLD_S = 0.05


class Hold:
    """Keeps back the background work a run orders as it ends until `release` (or `MAX_HOLD_S`): see the module."""

    def __init__(self) -> None:
        self.released = False

    def release(self) -> None:
        """The run's answer is out: its held work may start. Idempotent; any thread."""
        _background.release(self)


_hold: ContextVar[Hold | None] = ContextVar("wasmexec_spares_hold", default=None)


@contextmanager
def holding(hold: Hold) -> Iterator[None]:
    """Runs made inside (on this thread, in this context) have what they order as they end held by `hold`."""
    token = _hold.set(hold)
    try:
        yield
    finally:
        _hold.reset(token)


@dataclass(frozen=True)
class SpareKey:
    """The kind of run a spare can serve: everything fixed when its Store was made."""

    fuel: bool
    memory_bytes: int
    files: bool
    """The run has a workspace: a run directory preopened at /workspace and /tmp."""
    skills: Path | None = None
    """The directory preopened read-only at /skills (with `files` only)."""


@dataclass
class Spare:
    """A warmed-up instance, and the run directory it preopened (a workspace run adopts it)."""

    live: LiveInstance
    run_dir: RunDir | None


@dataclass
class SpareStats:
    """What the spares of one sandbox did so far."""

    hits: int = 0
    """Runs that took a ready spare."""
    misses: int = 0
    """Eligible runs that found none ready and made their own instance."""
    skipped: int = 0
    """Refills not made because runs arrived faster than spares could be made."""
    failed: int = 0
    """Spares discarded because making or warming them failed."""
    ready: int = 0
    """Spares ready now."""

    def __add__(self, other: SpareStats) -> SpareStats:
        """The counts of two sandboxes together (a server with several profiles)."""
        return SpareStats(self.hits + other.hits, self.misses + other.misses, self.skipped + other.skipped,
                          self.failed + other.failed, self.ready + other.ready)  # fmt: skip


class Spares:
    """The warm spares of one sandbox (see the module). Thread-safe."""

    def __init__(self, runtime: GuestRuntime, count: int, pool: RunDirPool) -> None:
        """
        Args:
            runtime: the image the spares are instances of.
            count: spares kept ready per kind of run; 0 turns spares off.
            pool: where a workspace spare takes its run directory (the one its runs release to).
        """
        if not 0 <= count <= MAX_SPARES:
            raise ValueError(f"spares must be between 0 and {MAX_SPARES}, not {count}")
        self.count = count
        self._runtime = runtime
        self._pool = pool
        self._lock = threading.Condition()
        self._ready: OrderedDict[SpareKey, list[Spare]] = OrderedDict()
        self._pending: dict[SpareKey, int] = {}
        self._wanted: dict[SpareKey, int] = {}
        """Spares kept ready per kind of run that ran: 1 to `count`, by what runs found (see the module)."""
        self._unused: dict[SpareKey, int] = {}
        self._last_end: dict[SpareKey, float] = {}
        self._gap_s: dict[SpareKey, float] = {}
        self._make_s: float | None = None
        self._skips: dict[SpareKey, int] = {}
        self._stats = SpareStats()
        self._closed = count == 0
        if count:
            _open_pools.add(self)

    def take(self, key: SpareKey, busy: bool = False) -> Spare | None:
        """A ready spare of `key` (the caller owns it now), or None: the run makes its own instance.

        Orders the next spare now (unless other runs are going, `busy`), to be made while this run goes on.
        """
        now = time.monotonic()
        with self._lock:
            last = self._last_end.get(key)
            if last is not None:
                self._gap_s[key] = _smoothed(self._gap_s.get(key), now - last)
            gap = self._gap_s.get(key)
            early = gap is not None and self._make_s is not None and gap < self._make_s
            ready = self._ready.get(key)
            wanted = self._wanted.get(key)
            spare: Spare | None = None
            if ready:
                self._stats.hits += 1
                self._ready.move_to_end(key)
                spare = ready.pop()
                unused = self._unused.get(key, 0) + 1 if ready else 0
                if wanted is not None and unused >= _SHRINK_AFTER:
                    wanted, unused = max(1, wanted - 1), 0
                self._unused[key] = unused
            else:
                self._stats.misses += 1
                if wanted is not None:  # runs of this kind come faster than spares are ready: keep one more
                    wanted += 1
            if len(self._wanted) >= _MAX_TIMED and key not in self._wanted:
                for timings in (self._wanted, self._unused, self._last_end, self._gap_s, self._skips):
                    timings.clear()  # many kinds of run (client-chosen limits): start over
            self._wanted[key] = min(self.count, wanted or 1)
        if early and not busy and _core_free():  # runs come faster than spares: make one while this run goes on
            self.fill(key)
        return spare

    def refill(self, key: SpareKey, busy: bool = False) -> None:
        """After a run of `key` ended: has spares made unless enough are ready or coming, or other runs are
        still going (`busy`: the spare would take CPU from them; the run that ends last orders it)."""
        with self._lock:
            self._last_end[key] = time.monotonic()
            gap = self._gap_s.get(key)
            too_fast = gap is not None and self._make_s is not None and gap < self._make_s
            # No core free and runs too fast for a spare to be ready: it would only take CPU from them
            # (one in `_PROBE_EVERY` is made anyway: the time to make one is measured again).
            skip = too_fast and self._skips.get(key, 0) < _PROBE_EVERY - 1 and not _core_free()
            if busy or skip:
                self._skips[key] = self._skips.get(key, 0) + 1 if skip else self._skips.get(key, 0)
                self._stats.skipped += 1
                return
            self._skips[key] = 0
        self.fill(key, _hold.get())

    def fill(self, key: SpareKey, hold: Hold | None = None) -> None:
        """Has spares of `key` made in the background up to the number wanted (e.g. when the sandbox is prepared),
        once `hold` (if any) is released."""
        with self._lock:
            if self._closed:
                return
            wanted = self._wanted.get(key, min(1, self.count))
            missing = wanted - len(self._ready.get(key, ())) - self._pending.get(key, 0)
            if missing <= 0:
                return
            self._pending[key] = self._pending.get(key, 0) + missing
        for _ in range(missing):
            _background.make(self, key, hold)

    def wait_ready(self, key: SpareKey, timeout_s: float = 10.0) -> bool:
        """Waits until a spare of `key` is ready or none is coming; whether one is ready."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self._ready.get(key) and self._pending.get(key, 0) > 0:
                if not self._lock.wait(max(0.0, deadline - time.monotonic())):
                    break
            return bool(self._ready.get(key))

    def stats(self) -> SpareStats:
        with self._lock:
            ready = sum(len(spares) for spares in self._ready.values())
            return SpareStats(self._stats.hits, self._stats.misses, self._stats.skipped, self._stats.failed, ready)

    def close(self) -> None:
        """Closes the ready spares and makes no more. Idempotent."""
        with self._lock:
            self._closed = True
            dropped = [spare for spares in self._ready.values() for spare in spares]
            self._ready.clear()
            self._lock.notify_all()
        for spare in dropped:
            self._discard(spare)
        _open_pools.discard(self)

    def make(self, key: SpareKey) -> None:
        """Makes one spare of `key` (on the background thread) and keeps it, unless the pool closed meanwhile."""
        spare: Spare | None = None
        started = time.monotonic()
        if not self._closed:
            spare = self._new_spare(key)
        elapsed = time.monotonic() - started
        evicted: list[Spare] = []
        with self._lock:
            self._pending[key] = max(0, self._pending.get(key, 0) - 1)
            if spare is None:
                if not self._closed:
                    self._stats.failed += 1
            elif self._closed:
                evicted.append(spare)
            else:
                self._make_s = _smoothed(self._make_s, elapsed)
                self._ready.setdefault(key, []).append(spare)
                self._ready.move_to_end(key)
                while len(self._ready) > MAX_KEYS:
                    evicted.extend(self._ready.popitem(last=False)[1])
            self._lock.notify_all()
        for old in evicted:
            self._discard(old)

    def _new_spare(self, key: SpareKey) -> Spare | None:
        """A warmed-up instance of `key`; None when making or warming it failed (it is discarded)."""
        from wasmexec._sandbox.epoch import CHECK_EVERY_TICKS
        from wasmexec._sandbox.instance import LiveInstance
        from wasmexec._workspace.workspace import preopen

        run_dir: RunDir | None = None
        live: LiveInstance | None = None
        try:
            guest = self._runtime.guest(key.fuel)
            if key.memory_bytes < guest.memory_floor_bytes:
                return None
            adds: Callable[..., None] | None = None
            if key.files:
                run_dir = self._pool.take()
                adds = partial(preopen, workspace=run_dir.workspace, tmp=run_dir.tmp, skills=key.skills)
            every = 1 if key.files else CHECK_EVERY_TICKS  # as the frame watches a workspace run
            live = LiveInstance(guest, key.memory_bytes, every, adds)
            if live.warm():
                return Spare(live, run_dir)
        except Exception:
            pass  # a spare that cannot be made is a miss for the next run, never an error
        self._discard(Spare(live, run_dir) if live is not None else None, run_dir)
        return None

    def _discard(self, spare: Spare | None, run_dir: RunDir | None = None) -> None:
        """Closes a spare no run will use, and gives its run directory to the pool to remove."""
        if spare is not None:
            spare.live.close()
            run_dir = spare.run_dir
        if run_dir is not None:
            self._pool.release(run_dir)  # removed, never handed to another run


#: Runs of this process in progress, on any sandbox (`running`).
_runs_in_progress = 0
_runs_lock = threading.Lock()


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # a container's or taskset's cores, not the machine's
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_CORES = _usable_cores()


@contextmanager
def running() -> Iterator[None]:
    """Counts a run as in progress while inside (from before it takes a spare until after it orders the next)."""
    global _runs_in_progress
    with _runs_lock:
        _runs_in_progress += 1
    try:
        yield
    finally:
        with _runs_lock:
            _runs_in_progress -= 1


def _core_free() -> bool:
    """Whether a core is left for making a spare beside this process's runs in progress: only then does a
    spare made alongside them not slow them down. (A run asking at take time counts itself.)"""
    return _runs_in_progress + 1 <= _CORES


def _smoothed(average: float | None, sample: float) -> float:
    return sample if average is None else average + _SMOOTHING * (sample - average)


def close_later(live: LiveInstance) -> None:
    """Closes a used instance on the background thread, before it makes any spare (off the run's path).

    The run has unbound it (`LiveInstance.stop`): nothing it does now reaches the run. While the
    interpreter exits the caller closes it itself.
    """
    if not _background.later(live.close, _hold.get()):
        live.close()


def after_answer(cleanup: Callable[[], None]) -> None:
    """Runs a run's `cleanup` (its workspace's release) on the background thread once the run's `Hold` is
    released, so it takes neither a core nor the GIL from sending the answer; here and now without a hold."""
    hold = _hold.get()
    if hold is None or not _background.later(cleanup, hold):
        cleanup()


_Item = TypeVar("_Item")


class _Background:
    """The one background thread that closes used instances and makes spares for every pool of the process."""

    def __init__(self) -> None:
        # Each with the hold it waits for (None: none) and when it was queued (`time.monotonic`).
        self._closes: deque[tuple[Callable[[], None], Hold | None, float]] = deque()
        self._makes: deque[tuple[tuple[weakref.ref[Spares], SpareKey], Hold | None, float]] = deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def make(self, spares: Spares, key: SpareKey, hold: Hold | None = None) -> None:
        with self._wake:
            if self._stopped:  # the interpreter is exiting
                return
            woken = self._waking_needed(hold)
            self._makes.append(((weakref.ref(spares), key), hold, time.monotonic()))
            self._start(woken)

    def later(self, close: Callable[[], None], hold: Hold | None = None) -> bool:
        """Queues `close` (a used instance's, a workspace's release); False when the thread has stopped (the
        interpreter is exiting)."""
        with self._wake:
            if self._stopped:
                return False
            woken = self._waking_needed(hold)
            self._closes.append((close, hold, time.monotonic()))
            self._start(woken)
            return True

    def release(self, hold: Hold) -> None:
        with self._wake:
            hold.released = True
            self._wake.notify()

    def _waking_needed(self, hold: Hold | None) -> bool:
        """Whether queueing an item under `hold` must wake the thread: not when a held item is queued already,
        since the thread then waits with a deadline no later than this one's, and the release wakes it (a
        wake-up saved while the answer is being sent)."""
        queued = (other for queue in (self._closes, self._makes) for _, other, _ in queue)
        return hold is None or not any(other is not None and not other.released for other in queued)

    def _start(self, wake: bool = True) -> None:
        if self._thread is None:
            # A guest-stack thread: a spare's warm-up runs on it in place, with no hand-off to another thread.
            self._thread = guest_thread(self._work, name="wasmexec-spares")
        if wake:
            self._wake.notify()

    def _next(self, queue: deque[tuple[_Item, Hold | None, float]], now: float) -> _Item | None:
        """The first item of `queue` not held (stopping holds nothing); None if every one is."""
        for index, (item, hold, queued) in enumerate(queue):
            if hold is None or hold.released or now - queued >= MAX_HOLD_S or self._stopped:
                del queue[index]
                return item
        return None

    def _work(self) -> None:
        while True:
            with self._wake:
                while True:
                    now = time.monotonic()
                    close = self._next(self._closes, now)
                    item = None if close is not None or self._stopped else self._next(self._makes, now)
                    if close is not None or item is not None or (self._stopped and not self._closes):
                        break
                    held = [queued for queue in (self._closes, self._makes) for _, _, queued in queue]
                    # Until the oldest held item's time is up (a release wakes it sooner), or until work comes.
                    self._wake.wait(max(0.0, min(held) + MAX_HOLD_S - now) if held else None)
                if close is None and item is None:
                    return  # stopped, and every close done
            if close is not None:
                try:
                    close()
                except Exception:  # one failed clean-up (a full disk) must not end the thread
                    pass
                del close
                continue
            assert item is not None
            spares = item[0]()
            if spares is not None:
                spares.make(item[1])
            del spares  # a pool dropped meanwhile must not be kept alive by this frame

    def stop(self, timeout_s: float) -> None:
        """Ends the thread after the spare being made (if any) and every close queued: before the interpreter exits."""
        with self._wake:
            self._stopped = True
            self._makes.clear()
            thread = self._thread
            self._wake.notify()
        if thread is not None:
            thread.join(timeout_s)


_background = _Background()
_open_pools: weakref.WeakSet[Spares] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Before the interpreter exits: no more spares, the one being made finished, every spare closed."""
    pools = list(_open_pools)
    for spares in pools:
        with spares._lock:
            spares._closed = True
    _background.stop(_EXIT_WAIT_S)
    for spares in pools:
        spares.close()
