"""Component variants for bench_link.py: libraries with their link-time addresses folded, or run
through Binaryen's optimizer.

componentize-py links libpython, libc and the rest as position-independent shared libraries
(``dylink.0``) inside one component. Such code reaches every static object through a global:
``__memory_base`` / ``__table_base`` plus an offset for its own data, a ``GOT.mem`` / ``GOT.func``
import for another library's (``Py_None``, ``PyLong_Type``, the exception types, ...). Under
wasmtime an imported global costs two loads (the import's pointer from the instance context,
then the value) on every access, because its value is unknown when the code is compiled.

Yet all of them are fixed once the component is built: the linker's "env" module defines every
one with a constant initializer (the libraries' placement, decided at link time; the init module
that relocated them ran before the pre-initialized snapshot was taken, which then dropped its
start), and nothing writes them afterwards (library code never sets its GOT imports; the "env"
module has no code that does). `fold` turns each library's foldable imports into constants in its
own module and runs Binaryen's ``simplify-globals``, which puts the constants into the code.
``__stack_pointer`` (changes at run time) stays an import.

Measured with bench_link.py (benchmarks/README.md, row 7): the folded component runs
bench_core's workloads within +-2% of the original; ``-O2`` is no faster either. Kept as the
tool for the next attempt (merging the modules, so that calls into libc become direct).

    python benchmarks/link_fold.py IN OUT [fold|roundtrip|O1|O2|O3] [--only N]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from binaryen_api import Module

#: The passes run on each folded library: puts the now-constant globals into the code.
PASSES = ["simplify-globals"]
#: Imports whose value is a link-time address: a library's placement, and its global offset table.
_FOLDED_ENV = frozenset({"__memory_base", "__table_base"})
_GOT_MODULES = frozenset({"GOT.mem", "GOT.func"})

_COMPONENT_HEADER = b"\0asm\x0d\0\x01\0"
_CORE_HEADER = b"\0asm\x01\0\0\0"
_CORE_MODULE, _CORE_INSTANCE, _ALIAS = 1, 2, 6
_CORE_SORT, _CORE_GLOBAL, _CORE_INSTANCE_SORT = 0x00, 0x03, 0x12
_ALIAS_CORE_EXPORT = 0x01
_KIND_FUNC, _KIND_TABLE, _KIND_MEMORY, _KIND_GLOBAL, _KIND_TAG = range(5)
_I32_CONST, _END = 0x41, 0x0B
#: Constant-expression opcodes (extended-const and reference types) by what follows them.
_CONST_LEB_OPERAND = frozenset({0x41, 0x42, 0x23, 0xD2})  # i32/i64.const, global.get, ref.func
_CONST_FIXED_OPERAND = {0x43: 4, 0x44: 8, 0xD0: 1}  # f32/f64.const, ref.null (an abstract heap type)
_CONST_NO_OPERAND = frozenset({0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E})  # i32/i64 add, sub, mul


class LinkError(ValueError):
    """The component does not have the shape this step understands."""


@dataclass
class _Reader:
    data: bytes
    at: int = 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise LinkError("truncated")
        self.at += 1
        return self.data[self.at - 1]

    def u32(self) -> int:
        return self._leb(signed=False)

    def s32(self) -> int:
        """A signed LEB128 as its 32-bit two's complement bit pattern."""
        return self._leb(signed=True)

    def _leb(self, signed: bool) -> int:
        result = shift = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return (result - (1 << shift) if signed and byte & 0x40 else result) & 0xFFFFFFFF
            if shift > 35:
                raise LinkError("LEB128 too long")

    def skip_leb(self) -> None:
        for _ in range(10):
            if self.byte() < 0x80:
                return
        raise LinkError("LEB128 too long")

    def name(self) -> str:
        size = self.u32()
        self.at += size
        if self.at > len(self.data):
            raise LinkError("truncated name")
        return self.data[self.at - size : self.at].decode()

    def limits(self) -> None:
        flags = self.byte()
        self.u32()
        if flags & 1:
            self.u32()


@dataclass(frozen=True)
class _Section:
    kind: int
    start: int  # of the section's id byte
    body: int  # of its payload
    end: int


def _sections(data: bytes, header: bytes) -> Iterator[_Section]:
    if data[:8] != header:
        raise LinkError("not a wasm component" if header == _COMPONENT_HEADER else "not a wasm module")
    reader = _Reader(data, 8)
    while reader.at < len(data):
        start, kind = reader.at, reader.byte()
        size = reader.u32()
        body = reader.at
        reader.at += size
        if reader.at > len(data):
            raise LinkError("a section runs past the end")
        yield _Section(kind, start, body, reader.at)


@dataclass
class _CoreModule:
    section: int  # its index among the component's sections
    data: bytes
    global_imports: list[tuple[str, str]] = field(default_factory=list)
    exported_globals: dict[str, int] = field(default_factory=dict)  # name -> global index
    constant_globals: dict[int, int] = field(default_factory=dict)  # defined global index -> i32 init
    dylink: bool = False


def _read_core_module(section: int, data: bytes) -> _CoreModule:
    module = _CoreModule(section, data)
    imported = 0
    for part in _sections(data, _CORE_HEADER):
        reader = _Reader(data, part.body)
        if part.kind == 0:
            module.dylink = module.dylink or reader.name() == "dylink.0"
        elif part.kind == 2:
            for _ in range(reader.u32()):
                where, name, kind = reader.name(), reader.name(), reader.byte()
                if kind in (_KIND_FUNC, _KIND_TAG):
                    reader.u32() if kind == _KIND_FUNC else (reader.byte(), reader.u32())
                elif kind == _KIND_TABLE:
                    reader.byte()
                    reader.limits()
                elif kind == _KIND_MEMORY:
                    reader.limits()
                elif kind == _KIND_GLOBAL:
                    reader.byte()
                    reader.byte()
                    module.global_imports.append((where, name))
                else:
                    raise LinkError(f"import kind {kind}")
            imported = len(module.global_imports)
        elif part.kind == 6:
            for index in range(reader.u32()):
                reader.at += 2  # value type, mutability
                value = _constant(reader)
                if value is not None:
                    module.constant_globals[imported + index] = value
        elif part.kind == 7:
            for _ in range(reader.u32()):
                name, kind, index = reader.name(), reader.byte(), reader.u32()
                if kind == _KIND_GLOBAL:
                    module.exported_globals[name] = index
    return module


def _constant(reader: _Reader) -> int | None:
    """A global's init expression: its value when it is a lone ``i32.const``, else None (skipped)."""
    if reader.data[reader.at : reader.at + 1] == bytes([_I32_CONST]):
        reader.byte()
        value = reader.s32()
        if reader.byte() == _END:
            return value
        reader.at -= 1
    while (opcode := reader.byte()) != _END:
        if opcode in _CONST_LEB_OPERAND:
            reader.skip_leb()
        elif opcode in _CONST_FIXED_OPERAND:
            reader.at += _CONST_FIXED_OPERAND[opcode]
        elif opcode not in _CONST_NO_OPERAND:
            raise LinkError(f"opcode {opcode:#x} in a constant expression")
    return None


@dataclass(frozen=True)
class _Wiring:
    modules: list[_CoreModule]
    instantiations: dict[int, tuple[int, dict[str, int]]]  # core instance -> (module, args)
    inline: dict[int, dict[str, tuple[int, int]]]  # core instance -> export name -> (sort, index)
    global_aliases: list[tuple[int, str]]  # core global index -> (core instance, export name)


def _read_wiring(component: bytes) -> _Wiring:
    modules: list[_CoreModule] = []
    instantiations: dict[int, tuple[int, dict[str, int]]] = {}
    inline: dict[int, dict[str, tuple[int, int]]] = {}
    global_aliases: list[tuple[int, str]] = []
    instances = 0
    for number, part in enumerate(_sections(component, _COMPONENT_HEADER)):
        reader = _Reader(component, part.body)
        if part.kind == _CORE_MODULE:
            modules.append(_read_core_module(number, component[part.body : part.end]))
        elif part.kind == _CORE_INSTANCE:
            for _ in range(reader.u32()):
                if reader.byte() == 0:
                    module = reader.u32()
                    args = {}
                    for _ in range(reader.u32()):
                        name = reader.name()
                        if reader.byte() != _CORE_INSTANCE_SORT:
                            raise LinkError("a core instantiation argument that is not an instance")
                        args[name] = reader.u32()
                    instantiations[instances] = (module, args)
                else:
                    exports = {}
                    for _ in range(reader.u32()):
                        name = reader.name()
                        sort = reader.byte()
                        exports[name] = (sort, reader.u32())
                    inline[instances] = exports
                instances += 1
        elif part.kind == _ALIAS:
            for _ in range(reader.u32()):
                sort = reader.byte()
                core_sort = reader.byte() if sort == _CORE_SORT else None
                target = reader.byte()
                if target == 2:  # outer alias: two indices
                    reader.u32()
                    reader.u32()
                    if core_sort in (_CORE_INSTANCE_SORT, _CORE_GLOBAL):
                        raise LinkError("an outer alias of a core instance or global")
                    continue
                instance, name = reader.u32(), reader.name()
                if core_sort == _CORE_INSTANCE_SORT:
                    raise LinkError("an aliased core instance")  # would shift the instance numbering
                if core_sort == _CORE_GLOBAL:
                    if target != _ALIAS_CORE_EXPORT:
                        raise LinkError("a core global aliased from a component instance")
                    global_aliases.append((instance, name))
    return _Wiring(modules, instantiations, inline, global_aliases)


def link_constants(wiring: _Wiring, module_index: int) -> dict[tuple[str, str], int]:
    """The foldable global imports of one core module and the values the component gives them."""
    instantiated = [args for module, args in wiring.instantiations.values() if module == module_index]
    if len(instantiated) != 1:
        return {}  # instantiated never or more than once: leave it alone
    (args,) = instantiated
    found: dict[tuple[str, str], int] = {}
    for where, name in wiring.modules[module_index].global_imports:
        if not (where in _GOT_MODULES or (where == "env" and name in _FOLDED_ENV)):
            continue
        source = _source(wiring, args.get(where), name)
        if source is None:
            raise LinkError(f"cannot tell where {where}.{name} comes from")
        found[where, name] = source
    return found


def _source(wiring: _Wiring, instance: int | None, name: str) -> int | None:
    """The constant initial value of the global that `instance`'s export `name` is, if it is one."""
    if instance in wiring.inline:
        sort, index = wiring.inline[instance].get(name, (None, -1))
        if sort != _CORE_GLOBAL or not 0 <= index < len(wiring.global_aliases):
            return None
        instance, name = wiring.global_aliases[index]
    if instance not in wiring.instantiations:
        return None
    module = wiring.modules[wiring.instantiations[instance][0]]
    index = module.exported_globals.get(name)
    return None if index is None else module.constant_globals.get(index)


def rewrite_module(wasm: bytes, constants: dict[tuple[str, str], int], mode: str) -> bytes:
    """One library rewritten by Binaryen: ``fold`` (its link-time imports made constants, then
    `PASSES`), ``roundtrip`` (read and written back, the control) or ``O1``-``O3`` (wasm-opt's pipeline)."""
    module = Module(wasm)
    try:
        if mode == "fold":
            for item in list(module.globals()):
                if item.imported_from in constants and item.is_i32:
                    module.set_i32_global(item.name, constants[item.imported_from], mutable=False)
            # A defined global's init may read __memory_base and the like, which are no longer imports.
            for item in list(module.globals()):
                if item.imported_from is None and item.is_i32:
                    value = module.constant_init(item.name)
                    if value is not None:
                        module.set_i32_global(item.name, value, item.mutable)
            module.fold_element_offsets()
            module.run_passes(PASSES)
        elif mode.startswith("O"):
            module.optimize(int(mode[1:]))
        if not module.validate():
            raise LinkError("Binaryen rejects the rewritten module")
        return module.write()
    finally:
        module.close()


def rewrite(component: bytes, mode: str = "fold", only: int | None = None) -> bytes:
    """The component with its dynamically linked libraries (or only core module `only`, the largest
    when -1: libpython) rewritten by `rewrite_module`."""
    wiring = _read_wiring(component)
    replaced: dict[int, bytes] = {}
    if only == -1:
        libraries = [index for index, module in enumerate(wiring.modules) if module.dylink]
        only = max(libraries, key=lambda index: len(wiring.modules[index].data))
    for index, module in enumerate(wiring.modules):
        if not module.dylink or (only is not None and index != only):
            continue
        constants = link_constants(wiring, index)
        if constants or mode != "fold":
            started = time.monotonic()
            replaced[module.section] = rewrite_module(module.data, constants, mode)
            print(f"{mode}: core module {index} ({len(constants)} link-time constants) "
                  f"{len(module.data)} -> {len(replaced[module.section])} bytes "
                  f"in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    return _splice(component, replaced)


def _splice(component: bytes, replaced: dict[int, bytes]) -> bytes:
    out = bytearray(component[:8])
    for number, part in enumerate(_sections(component, _COMPONENT_HEADER)):
        if number in replaced:
            out += bytes([_CORE_MODULE]) + _leb(len(replaced[number])) + replaced[number]
        else:
            out += component[part.start : part.end]
    return bytes(out)


def _leb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


def main(argv: list[str]) -> int:
    """``python link_fold.py IN OUT [MODE] [--only NAME]``: bench_link runs it as a subprocess."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("mode", nargs="?", default="fold", choices=["fold", "roundtrip", "O1", "O2", "O3"])
    parser.add_argument("--only", type=int, help="rewrite only this core module (-1: the largest library, libpython)")
    args = parser.parse_args(argv)
    try:
        args.target.write_bytes(rewrite(args.source.read_bytes(), args.mode, args.only))
    except (LinkError, ValueError, OSError) as exc:
        print(f"link_fold: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
