"""Binaryen's C API over ctypes, for `link_fold` (bench_link.py's component variants).

The library comes from the ``icpp-binaryen`` wheel (`libbinaryen.so`, Binaryen 116; benchmarks/
requirements.txt): that package ships no ``wasm-opt`` binary and its own cffi bindings cover only a
few functions, so the ones needed here are declared here. Binaryen ends the process on input it
cannot parse: call it in a process of its own.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

#: The wasm features componentize-py's libraries use (wasi-sdk's defaults, plus extended-const for
#: the position-independent code's ``__memory_base + offset`` globals). Binaryen validates with these.
FEATURES = ("BulkMemory", "MutableGlobals", "SignExt", "NontrappingFPToInt", "Multivalue", "ReferenceTypes",
            "ExtendedConst")  # fmt: skip

_P = ctypes.c_void_p
_S = ctypes.c_char_p
_U32 = ctypes.c_uint32
#: name: (argument types, result type)
_SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "BinaryenModuleRead": ([_S, ctypes.c_size_t], _P),
    "BinaryenModuleDispose": ([_P], None),
    "BinaryenModuleSetFeatures": ([_P, _U32], None),
    "BinaryenModuleValidate": ([_P], ctypes.c_bool),
    "BinaryenModuleRunPasses": ([_P, ctypes.POINTER(_S), _U32], None),
    "BinaryenSetDebugInfo": ([ctypes.c_bool], None),
    "BinaryenSetOptimizeLevel": ([ctypes.c_int], None),
    "BinaryenSetShrinkLevel": ([ctypes.c_int], None),
    "BinaryenModuleOptimize": ([_P], None),
    "BinaryenGetNumGlobals": ([_P], _U32),
    "BinaryenGetGlobalByIndex": ([_P, _U32], _P),
    "BinaryenGetGlobal": ([_P, _S], _P),
    "BinaryenGlobalGetName": ([_P], _S),
    "BinaryenGlobalImportGetModule": ([_P], _S),
    "BinaryenGlobalImportGetBase": ([_P], _S),
    "BinaryenGlobalIsMutable": ([_P], ctypes.c_bool),
    "BinaryenGlobalGetType": ([_P], ctypes.c_size_t),
    "BinaryenGlobalGetInitExpr": ([_P], _P),
    "BinaryenRemoveGlobal": ([_P, _S], None),
    "BinaryenAddGlobal": ([_P, _S, ctypes.c_size_t, ctypes.c_bool, _P], _P),
    "BinaryenTypeInt32": ([], ctypes.c_size_t),
    "BinaryenExpressionGetId": ([_P], _U32),
    "BinaryenConstId": ([], _U32),
    "BinaryenGlobalGetId": ([], _U32),
    "BinaryenBinaryId": ([], _U32),
    "BinaryenAddInt32": ([], ctypes.c_int32),
    "BinaryenBinaryGetOp": ([_P], ctypes.c_int32),
    "BinaryenBinaryGetLeft": ([_P], _P),
    "BinaryenBinaryGetRight": ([_P], _P),
    "BinaryenGlobalGetGetName": ([_P], _S),
    "BinaryenConstGetValueI32": ([_P], ctypes.c_int32),
    "BinaryenGetNumElementSegments": ([_P], _U32),
    "BinaryenGetElementSegmentByIndex": ([_P, _U32], _P),
    "BinaryenElementSegmentIsPassive": ([_P], ctypes.c_bool),
    "BinaryenElementSegmentGetOffset": ([_P], _P),
    "BinaryenElementSegmentGetLength": ([_P], _U32),
    "BinaryenElementSegmentGetData": ([_P, _U32], _S),
    "BinaryenElementSegmentGetTable": ([_P], _S),
    "BinaryenElementSegmentGetName": ([_P], _S),
    "BinaryenRemoveElementSegment": ([_P, _S], None),
    "BinaryenAddActiveElementSegment": ([_P, _S, _S, ctypes.POINTER(_S), _U32, _P], _P),
}


class _Literal(ctypes.Structure):
    """`BinaryenLiteral`: a type and a 16-byte union, returned by value."""

    _fields_ = [("type", ctypes.c_size_t), ("value", ctypes.c_uint8 * 16)]


class _Written(ctypes.Structure):
    """`BinaryenModuleAllocateAndWriteResult`."""

    _fields_ = [("binary", _P), ("size", ctypes.c_size_t), ("source_map", _P)]


def library_path() -> Path | None:
    """Where the icpp-binaryen wheel's library is, without importing the package (it loads cffi)."""
    spec = importlib.util.find_spec("icpp_binaryen")
    if spec is None or spec.origin is None:
        return None
    name = "libbinaryen.dylib" if sys.platform == "darwin" else "libbinaryen.so"
    path = Path(spec.origin).parent / "lib" / name
    return path if path.is_file() else None


@cache
def _lib() -> Any:
    path = library_path()
    if path is None:
        raise OSError("the icpp-binaryen package (Binaryen's library) is not installed")
    lib = ctypes.CDLL(str(path))
    for name, (argtypes, restype) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    for name in ("BinaryenLiteralInt32",):
        getattr(lib, name).argtypes, getattr(lib, name).restype = [ctypes.c_int32], _Literal
    lib.BinaryenConst.argtypes, lib.BinaryenConst.restype = [_P, _Literal], _P
    lib.BinaryenModuleAllocateAndWrite.argtypes, lib.BinaryenModuleAllocateAndWrite.restype = [_P, _S], _Written
    for feature in FEATURES:
        getattr(lib, f"BinaryenFeature{feature}").restype = _U32
    lib.free = ctypes.CDLL(None).free
    lib.free.argtypes = [_P]
    return lib


@dataclass(frozen=True)
class Global:
    """One global of a module, as `Module.globals` lists it."""

    name: bytes
    imported_from: tuple[str, str] | None
    mutable: bool
    is_i32: bool


class Module:
    """One core module read into Binaryen (names are Binaryen's internal names, which it keeps stable)."""

    def __init__(self, wasm: bytes) -> None:
        lib = self._lib = _lib()
        self._ref = lib.BinaryenModuleRead(wasm, len(wasm))
        if not self._ref:
            raise ValueError("Binaryen could not read the module")
        features = 0
        for feature in FEATURES:
            features |= getattr(lib, f"BinaryenFeature{feature}")()
        lib.BinaryenModuleSetFeatures(self._ref, features)
        lib.BinaryenSetDebugInfo(True)  # keeps the name section: wasm backtraces stay readable

    def close(self) -> None:
        if self._ref:
            self._lib.BinaryenModuleDispose(self._ref)
            self._ref = None

    def globals(self) -> Iterator[Global]:
        lib, ref = self._lib, self._ref
        i32 = lib.BinaryenTypeInt32()
        handles = [lib.BinaryenGetGlobalByIndex(ref, i) for i in range(lib.BinaryenGetNumGlobals(ref))]
        for handle in handles:
            module = lib.BinaryenGlobalImportGetModule(handle)
            source = (module.decode(), lib.BinaryenGlobalImportGetBase(handle).decode()) if module else None
            yield Global(lib.BinaryenGlobalGetName(handle), source, lib.BinaryenGlobalIsMutable(handle),
                         lib.BinaryenGlobalGetType(handle) == i32)  # fmt: skip

    def set_i32_global(self, name: bytes, value: int, mutable: bool) -> None:
        """Makes global `name` (imported or defined) a defined one starting at `value`, under the same name."""
        lib = self._lib
        lib.BinaryenRemoveGlobal(self._ref, name)
        lib.BinaryenAddGlobal(self._ref, name, lib.BinaryenTypeInt32(), mutable, self._i32(value))

    def constant_init(self, name: bytes) -> int | None:
        """The value of a defined global's init expression (constants, immutable defined globals and
        ``i32.add`` of them); None when it depends on an import."""
        return self._evaluate(self._lib.BinaryenGlobalGetInitExpr(self._lib.BinaryenGetGlobal(self._ref, name)))

    def fold_element_offsets(self) -> int:
        """Rewrites each active element segment's offset as the constant it evaluates to; returns how many.

        Needed because a constant expression may read only imported globals: once ``__table_base``
        is defined, ``(global.get $__table_base)`` is no longer a valid offset.
        """
        lib, ref = self._lib, self._ref
        segments = [lib.BinaryenGetElementSegmentByIndex(ref, i) for i in range(lib.BinaryenGetNumElementSegments(ref))]
        folded = []
        for segment in segments:
            if lib.BinaryenElementSegmentIsPassive(segment):
                continue
            offset = self._evaluate(lib.BinaryenElementSegmentGetOffset(segment))
            if offset is None:
                raise ValueError("an element segment's offset depends on an import")
            count = lib.BinaryenElementSegmentGetLength(segment)
            functions = [lib.BinaryenElementSegmentGetData(segment, i) for i in range(count)]
            name, table = lib.BinaryenElementSegmentGetName(segment), lib.BinaryenElementSegmentGetTable(segment)
            folded.append((name, table, functions, offset))
        for name, table, functions, offset in folded:
            lib.BinaryenRemoveElementSegment(ref, name)
            array = (_S * len(functions))(*functions)
            lib.BinaryenAddActiveElementSegment(ref, table, name, array, len(functions), self._i32(offset))
        return len(folded)

    def run_passes(self, passes: list[str]) -> None:
        array = (_S * len(passes))(*(name.encode() for name in passes))
        self._lib.BinaryenModuleRunPasses(self._ref, array, len(passes))

    def optimize(self, level: int) -> None:
        """wasm-opt's ``-O<level>`` pipeline (shrink level 0)."""
        self._lib.BinaryenSetOptimizeLevel(level)
        self._lib.BinaryenSetShrinkLevel(0)
        self._lib.BinaryenModuleOptimize(self._ref)

    def validate(self) -> bool:
        return bool(self._lib.BinaryenModuleValidate(self._ref))

    def write(self) -> bytes:
        lib = self._lib
        written = lib.BinaryenModuleAllocateAndWrite(self._ref, None)
        try:
            return ctypes.string_at(written.binary, written.size)
        finally:
            lib.free(written.binary)
            if written.source_map:
                lib.free(written.source_map)

    def _i32(self, value: int) -> Any:
        signed = value - (1 << 32) if value >= 1 << 31 else value
        return self._lib.BinaryenConst(self._ref, self._lib.BinaryenLiteralInt32(signed))

    def _evaluate(self, expression: Any) -> int | None:
        lib = self._lib
        kind = lib.BinaryenExpressionGetId(expression)
        if kind == lib.BinaryenConstId():
            return int(lib.BinaryenConstGetValueI32(expression)) & 0xFFFFFFFF
        if kind == lib.BinaryenGlobalGetId():
            handle = lib.BinaryenGetGlobal(self._ref, lib.BinaryenGlobalGetGetName(expression))
            if lib.BinaryenGlobalImportGetModule(handle) or lib.BinaryenGlobalIsMutable(handle):
                return None
            return self._evaluate(lib.BinaryenGlobalGetInitExpr(handle))
        if kind == lib.BinaryenBinaryId() and lib.BinaryenBinaryGetOp(expression) == lib.BinaryenAddInt32():
            left = self._evaluate(lib.BinaryenBinaryGetLeft(expression))
            right = self._evaluate(lib.BinaryenBinaryGetRight(expression))
            return None if left is None or right is None else (left + right) & 0xFFFFFFFF
        return None
