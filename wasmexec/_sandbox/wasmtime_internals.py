"""Every use of wasmtime-py's private modules and methods, in one place.

Pinned: wasmtime-py >=49,<51 (pyproject; 49 for the science image, 50 for the core). These are not
wasmtime-py's public API and may change in any release. On an upgrade (a new major, or a bump of the
upper pin), re-check, against the new wasmtime-py source:

- ``wasmtime._ffi`` (with ``wasmtime._bindings``, which it re-exports): the C API declarations used here (the component
  callback type and its ``wasmtime_component_val_t`` layout: ``kind``, ``of.string``, ``of.list``;
  ``wasmtime_component_linker_instance_add_func``, ``wasmtime_linker_define_func``,
  ``wasmtime_store_epoch_deadline_callback`` and its update-deadline kinds,
  ``wasmtime_config_async_stack_size_set``, the ``wasmtime_pooling_allocation_config_*`` setters and
  ``wasmtime_pooling_allocation_strategy_set`` (which copies the settings), ``wasmtime_error_new``,
  ``wasmtime_trap_new``, the byte-vector and value-list helpers, ``WASMTIME_I32``).
- ``wasmtime.component._linker``: ``FUNCTIONS`` (the slab of host functions its trampoline looks
  up) and ``func_finalize``; and its ``func_impl``, of which `hostcalls._dispatch` is a copy
  (lift the arguments, call, lower the result, invalidate the store, turn errors into traps).
- ``wasmtime.component._types.FuncType._from_ptr``, ``convert_from_c`` / ``convert_to_c``.
- ``WasmtimeError._from_ptr``, ``WasmtimeError._consume`` / ``Trap._consume`` (hand the error
  pointer to wasmtime, which takes ownership) and ``_invalidate`` on a store context or caller.

The security suite (tests/security/test_host_budget.py, test_door_pointers.py) exercises all of it
under both wasmtime versions; tests/unit/test_wasmtime_internals.py keeps other modules off them.
"""

from __future__ import annotations

import ctypes
from typing import Any

from wasmtime import Config, Trap, WasmtimeError
from wasmtime import _ffi as ffi
from wasmtime.component import _linker as component_linker
from wasmtime.component._types import FuncType

__all__ = ["component_linker", "error_from_pointer", "error_pointer", "ffi", "func_type", "invalidate",
           "lift_params", "lower_result", "use_pooling_allocator"]  # fmt: skip


def error_pointer(error: WasmtimeError | Trap) -> int:
    """`error` as the pointer a C callback returns to wasmtime (which then owns it)."""
    return ctypes.cast(error._consume(), ctypes.c_void_p).value or 0


def error_from_pointer(pointer: Any) -> WasmtimeError:
    """A ``wasmtime_error_t *`` that a C API call returned, as an exception to raise."""
    error: WasmtimeError = WasmtimeError._from_ptr(pointer)
    return error


def invalidate(context: Any) -> None:
    """Ends a store context's or caller's validity once its callback returns (wasmtime-py's trampolines do)."""
    context._invalidate()


def func_type(pointer: Any, store: Any) -> Any:
    """A component host function's type from its C callback's ``ty`` pointer (a context manager)."""
    return FuncType._from_ptr(pointer, owner=store)


def lift_params(func_type: Any, args: Any, nargs: int) -> list[Any]:
    """A component host function's C arguments as Python values, as wasmtime-py lifts them."""
    return [param.convert_from_c(args[index]) for index, (_, param) in enumerate(func_type.params)][:nargs]


def lower_result(func_type: Any, store: Any, result: Any, results: Any) -> None:
    """Writes a component host function's return value into its C result slot, as wasmtime-py does."""
    if func_type.result is not None:
        func_type.result.convert_to_c(store, result, results)


def use_pooling_allocator(config: Config, settings: dict[str, int]) -> None:
    """Makes engines of `config` use the pooling allocator with `settings` (``<name>`` of each
    ``wasmtime_pooling_allocation_config_<name>_set``); wasmtime-py does not wrap it."""
    pool = ffi.wasmtime_pooling_allocation_config_new()
    try:
        for name, value in settings.items():
            getattr(ffi, f"wasmtime_pooling_allocation_config_{name}_set")(pool, value)
        ffi.wasmtime_pooling_allocation_strategy_set(config.ptr(), pool)  # copies the settings
    finally:
        ffi.wasmtime_pooling_allocation_config_delete(pool)
