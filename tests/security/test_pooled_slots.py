"""The pooling allocator reuses memory and table slots: a new instance in a reused slot sees nothing of the last.

Wasmtime resets a slot when its instance is dropped (``madvise`` beyond the resident bytes, a
memset of the rest) and re-maps the module's heap image when the next instance is made. Two
advisories were leaks at exactly this point (GHSA-wh6w-3828-g9qf, 2022: the previous module's
heap image stayed mapped for a module without one; GHSA-6wgr-89rj-399p, 2026: data leakage
between pooling allocator instances). A pool of one slot forces every instance into the slot the
previous one used, so each test here writes a pattern in one instance and reads the raw memory
and tables of the next.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from wasmtime import Engine, Instance, Module, Store, WasiConfig, WasmtimeError

from tests.helpers import data_of, diagnostic, error_of, wait_until
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._sandbox.pooling import Pooling
from wasmexec._sandbox.runtime import DEFAULT_ENGINE, make_engine
from wasmexec._science import upstream

#: Bytes a previous tenant writes; found anywhere in the next tenant's memory, it leaked.
MARK = 0xA5
PAGES = 64  # 4 MiB: past the 1 MiB kept resident in one case, inside the 16 MiB of the other

#: Two modules sharing a slot: one with a heap image (a data segment) and one without, as in the 2022
#: advisory. ``dirty`` grows memory and fills it and the table; ``probe`` grows memory to the same
#: size and counts the bytes that are not zero (outside its own heap image) and the table entries set.
_WAT = """
(module
  (memory (export "memory") 1 1024)
  (table 8 funcref)
  (func $f)
  (elem declare func $f)
  {data}
  (func (export "dirty") (param $pages i32)
    (local $i i32)
    (drop (memory.grow (i32.sub (local.get $pages) (memory.size))))
    (memory.fill (i32.const 0) (i32.const {mark}) (i32.mul (local.get $pages) (i32.const 65536)))
    (loop $set
      (table.set (local.get $i) (ref.func $f))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $set (i32.lt_u (local.get $i) (i32.const 8)))))
  (func (export "probe") (param $pages i32) (param $skip i32) (result i32)
    (local $i i32) (local $found i32)
    (drop (memory.grow (i32.sub (local.get $pages) (memory.size))))
    (local.set $i (local.get $skip))
    (loop $bytes
      (if (i32.load8_u (local.get $i)) (then (local.set $found (i32.add (local.get $found) (i32.const 1)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $bytes (i32.lt_u (local.get $i) (i32.mul (local.get $pages) (i32.const 65536)))))
    (local.set $i (i32.const 0))
    (loop $slots
      (if (i32.eqz (ref.is_null (table.get (local.get $i))))
        (then (local.set $found (i32.add (local.get $found) (i32.const 1)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $slots (i32.lt_u (local.get $i) (i32.const 8))))
    (local.get $found)))
"""
_IMAGE = "secret"


def _store(engine: Engine) -> Store:
    store = Store(engine)
    store.set_epoch_deadline(1 << 62)  # the engines interrupt on epochs; nothing ticks this one
    return store


def _module(engine: Engine, with_image: bool) -> Module:
    data = f'(data (i32.const 0) "{_IMAGE}")' if with_image else ""
    return Module(engine, _WAT.format(data=data, mark=MARK))


@pytest.mark.parametrize("keep_resident_mb", [0, 1, 16], ids=["released", "1MiB-resident", "16MiB-resident"])
def test_a_reused_slot_shows_the_next_instance_none_of_the_last_ones_memory_or_table(keep_resident_mb: int) -> None:
    engine = make_engine(False, DEFAULT_ENGINE, Pooling(slots=1, keep_resident_mb=keep_resident_mb))
    with_image, without_image = _module(engine, True), _module(engine, False)
    for tenant, next_tenant, skip in [
        (with_image, without_image, 0),  # the 2022 advisory: a module without a heap image after one with
        (without_image, with_image, len(_IMAGE)),
        (with_image, with_image, len(_IMAGE)),
        (without_image, without_image, 0),
    ]:
        first = _store(engine)
        exports = Instance(first, tenant, []).exports(first)
        exports["dirty"](first, PAGES)
        assert exports["probe"](first, PAGES, 0) == PAGES * 65536 + 8  # the probe sees what is there
        with pytest.raises(WasmtimeError):  # the pool has one slot: a second live instance cannot have one
            Instance(_store(engine), tenant, [])
        first.close()  # frees the slot
        second = _store(engine)
        probe = Instance(second, next_tenant, []).exports(second)["probe"]
        assert probe(second, PAGES, skip) == 0
        second.close()


def _probe_code(size: int) -> str:
    return f"import builtins\nbuiltins.leftover = bytearray(b'\\xa5') * {size}\nresult = len(builtins.leftover)"


@pytest.mark.parametrize("keep_resident_mb", [0, 16], ids=["released", "16MiB-resident"])
def test_a_pooled_sandbox_of_one_slot_starts_every_run_pristine(keep_resident_mb: int) -> None:
    runtime = Runtime(pooling=Pooling(slots=1, keep_resident_mb=keep_resident_mb))
    sandbox = Sandbox(Limits(), runtime=runtime, spares=0)  # a spare would hold the only slot
    for _ in range(3):
        assert data_of(sandbox.run_sync(_probe_code(32 << 20))) == 32 << 20
        check = "import builtins\nresult = hasattr(builtins, 'leftover')"
        assert data_of(sandbox.run_sync(check)) is False


@pytest.mark.skipif(not upstream.installed(), reason="the science extra (its own venv, wasmtime 49) is not installed")
def test_the_science_images_memory_in_a_reused_slot_holds_nothing_the_last_run_wrote() -> None:
    """The science guest exports its memory, so the host reads the whole of the next instance's."""
    import os

    from wasmexec._science.guest import _turn
    from wasmexec._science.image import ScienceRuntime

    cache_dir = os.environ.get("WASMEXEC_CACHE_DIR")
    runtime = ScienceRuntime(Path(cache_dir) if cache_dir else None, pooling=Pooling(slots=1))
    guest = runtime.guest(False)
    marker = b"pooled-slot-probe:" + bytes(range(256))

    def instance() -> tuple[Store, object]:
        store = _store(guest.engine)
        wasi = WasiConfig()
        guest.configure(wasi)
        store.set_wasi(wasi)
        return store, guest.instantiate(store)

    store, first = instance()
    code = f"import builtins\nbuiltins.leftover = bytes.fromhex({marker.hex()!r}) * 200_000\n".encode()
    assert _turn(store, first, code) == 0
    memory = first.exports(store)["memory"]  # type: ignore[attr-defined]
    assert marker in memory.read(store, 0, memory.data_len(store))  # the probe can see its own writes
    store.close()
    store, second = instance()
    memory = second.exports(store)["memory"]  # type: ignore[attr-defined]
    assert marker not in memory.read(store, 0, memory.data_len(store))
    store.close()


def test_a_run_that_finds_every_slot_taken_is_told_to_retry_and_runs_once_one_is_free() -> None:
    runtime = Runtime(pooling=Pooling(slots=1))
    holder = Sandbox(Limits(), runtime=runtime, spares=1)
    holder.prepare()  # its ready spare holds the only slot
    wait_until(lambda: holder.spares.stats().ready == 1, "the spare to hold the slot")
    other = Sandbox(Limits(memory_mb=200), runtime=runtime, spares=0)  # another kind of run: a fresh instance
    refused = other.run_sync("result = 1")
    assert error_of(refused) == {"type": "SandboxError", "retryable": True,
                                 "message": "Every sandbox slot of this server's pooling allocator is in use; "
                                            "the code did not run."}  # fmt: skip
    assert diagnostic(refused, "SANDBOX_BUSY")["hint"].startswith("Retry shortly")
    holder.close()
    assert data_of(other.run_sync("result = 1")) == 1
