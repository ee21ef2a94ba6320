"""A user profile's packages compiled to bytecode for the guest's own Python, once, at build time.

Importing a package from source compiles every module in every run (an 8,000-line package:
about a billion wasm instructions, 200-300 ms), since no run can keep what it compiled. The
build runs one sandbox of the base image with the staged tree preopened *writable* at the
path runs see it (so tracebacks name the same files), whose only code is `compileall` over
it: compiling executes none of the packages' code. The ``__pycache__/*.<cache tag>.pyc`` it
writes are the guest's Python's (3.14 or 3.15, not the host's), then the tree is made
read-only like the rest.

The ``.pyc`` are unchecked-hash ones (PEP 552): the guest's importer loads them without
reading their source's mtime or hash. They are derived from the locked wheels and the base
image (the profile's identity covers both), and no more trusted than the sources next to
them: the tree's trust checks cover every file (`profile_store.tree_problem`). A module that
does not compile (Python 2 syntax in a test file, say) gets no ``.pyc``; importing it fails
as it would have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wasmexec._exceptions import BuildError
from wasmexec._limits import Limits
from wasmexec._sandbox.image import Image
from wasmexec._sandbox.runtime import ImageRuntime
from wasmexec._sandbox.sandbox import Sandbox
from wasmexec._userprofile import profile_store as store
from wasmexec._userprofile.user_image import GUEST_PACKAGES, UserImage

#: The compile run's wall clock: a large tree (thousands of modules) compiles in well under a minute.
COMPILE_TIMEOUT_MS = 10 * 60 * 1000
#: Its memory: compiling one large module takes tens of MiB.
COMPILE_MEMORY_MB = 1024
#: The guest's code: compileall over the tree, errors left out (such a module is imported as it would be).
_COMPILE = f"""
import compileall, py_compile
result = compileall.compile_dir({GUEST_PACKAGES!r}, quiet=2, workers=1,
                                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
"""


def compile_tree(staged: store.StoredProfile, base: Image[Any]) -> int:
    """Writes the bytecode of every module in `staged.tree` as the base image's Python compiles it;
    returns how many ``.pyc`` there are. A `BuildError` when the compile run fails."""
    runtime = ImageRuntime(UserImage(staged, base, writable=True))
    with Sandbox(Limits(timeout_ms=COMPILE_TIMEOUT_MS, memory_mb=COMPILE_MEMORY_MB, fuel=None), runtime=runtime,
                 spares=0, workspaces=False) as sandbox:  # fmt: skip
        outcome = sandbox.run_sync(_COMPILE)["result"]
    if not outcome["ok"]:
        raise BuildError(f"compiling the packages to bytecode failed: {str(outcome.get('error'))[:500]}")
    return sum(1 for _ in Path(staged.tree).rglob("*.pyc"))
