"""Wasmtime's pooling instance allocator: an operator's option, off by default.

By default every instance maps its own memory and tables and unmaps them when its Store
closes (the on-demand allocator). With `Pooling`, an engine reserves `Pooling.slots` memory
and table slots up front and hands each new instance a free one, reset in place from the
last. Measured on the shared 2-core machine (`benchmarks/bench_pooling.py`,
numbers in benchmarks/README.md): one run at a time gains nothing (about the same page faults
and CPU); keeping memory resident (`Pooling.keep_resident_mb`) trades page faults for a
memset and lifts 2-thread throughput of short runs. It also caps the sandboxes alive at once
per engine at `slots`: one more (a run or a spare) fails to instantiate.

A reused slot must show its next instance nothing of the last: tests/security/test_pooled_slots.py
forces reuse with a pool of one slot and reads the raw memory and tables of the next instance.
Wasmtime has fixed leaks at this point twice (GHSA-wh6w-3828-g9qf, fixed in 2.0.2;
GHSA-6wgr-89rj-399p, 2026, fixed in 36.0.7 / 42.0.2 / 43.0.1): every wasmtime-py we allow
(>= 49) carries both fixes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from wasmexec._limits import MAX_MEMORY_MB

#: The most slots a pool may have: each reserves (not commits) its memory's address space, about 4 GiB.
MAX_POOL_SLOTS = 10_000
#: The most memory per slot kept resident: beyond a sandbox's first pages, a memset costs more than a fault.
MAX_KEEP_RESIDENT_MB = 256
#: Core instances per sandbox: the default image's component has 14 (the science image's module, 1).
CORE_INSTANCES_PER_SANDBOX = 16
#: Tables per sandbox: the default image has 2, the science image 1.
TABLES_PER_SANDBOX = 4
#: Elements per table: CPython's function table has a few thousand entries, the science image's more.
TABLE_ELEMENTS = 200_000
#: Runtime state of one core instance / one component instance (VMContext): the default image needs 0.4 MiB.
INSTANCE_BYTES = 4 << 20


@dataclass(frozen=True)
class Pooling:
    """Settings of wasmtime's pooling instance allocator for a runtime's engines (`Runtime(pooling=...)`,
    ``wasmexec serve --pooling SLOTS``)."""

    slots: int
    """Sandboxes alive at once per engine (limit mode): runs and ready spares. One more fails to start,
    so give at least the concurrent runs plus the spares."""
    keep_resident_mb: int = 0
    """Memory (and table space) of each slot kept mapped between instances and reset with a memset
    instead of released: no page faults for those pages on the next run, at the cost of the memset and
    of that much resident memory per slot, used or not."""

    def __post_init__(self) -> None:
        if not 1 <= self.slots <= MAX_POOL_SLOTS:
            raise ValueError(f"pooling slots must be 1..{MAX_POOL_SLOTS}, not {self.slots}")
        if not 0 <= self.keep_resident_mb <= MAX_KEEP_RESIDENT_MB:
            raise ValueError(f"keep_resident_mb must be 0..{MAX_KEEP_RESIDENT_MB}, not {self.keep_resident_mb}")

    def settings(self, gc_heap: bool = False) -> dict[str, int]:
        """The C API's ``wasmtime_pooling_allocation_config_<name>_set`` values; `gc_heap`: each instance
        has a GC heap too (wasm exceptions live there), which takes a memory slot of its own."""
        resident = self.keep_resident_mb << 20
        memories = 2 if gc_heap else 1
        return {
            "total_component_instances": self.slots,
            "total_core_instances": self.slots * CORE_INSTANCES_PER_SANDBOX,
            # One linear memory per sandbox in both images (and its GC heap's): these cap live sandboxes at `slots`.
            "total_memories": self.slots * memories,
            "total_tables": self.slots * TABLES_PER_SANDBOX,
            "total_stacks": 0,  # no async calls: wasm runs on the calling thread's stack
            "total_gc_heaps": self.slots,
            "max_core_instances_per_component": CORE_INSTANCES_PER_SANDBOX,
            "max_memories_per_component": memories,
            "max_tables_per_component": TABLES_PER_SANDBOX,
            "max_memory_size": MAX_MEMORY_MB << 20,
            "table_elements": TABLE_ELEMENTS,
            "max_core_instance_size": INSTANCE_BYTES,
            "max_component_instance_size": INSTANCE_BYTES,
            "linear_memory_keep_resident": resident,
            "table_keep_resident": resident,
        }


#: Engines made on the pooling allocator (`make_engine`): a run on one frees its slot as it ends.
_POOLED: weakref.WeakSet[Any] = weakref.WeakSet()


def mark_pooled(engine: Any) -> None:
    """Records that `engine` runs its instances in a pool's slots."""
    _POOLED.add(engine)


def is_pooled(engine: Any) -> bool:
    """Whether `engine`'s instances take slots of a pool (a used Store must be closed before its slot is free)."""
    return engine in _POOLED
