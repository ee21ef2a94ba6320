"""Nothing of one run reaches the next through the metadata of its directories.

A run that left /workspace and /tmp empty used to hand the same host directories to a later run,
with the times it set: a covert channel between clients (issue 15). Every run now gets directories
no earlier run touched, with spares on and off.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import data_of
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._sandbox.spares import SpareKey

PLANTED = 4242424.0
#: What a run sees of its two directories: times, mode, inode number, size.
LOOK = (
    "import os\n"
    "look = {d: [os.stat(d).st_mtime, os.stat(d).st_mode, os.stat(d).st_ino, os.stat(d).st_size]\n"
    "        for d in ('/workspace', '/tmp')}\n"
)
#: Run A marks both directories every way it can: a planted time on /workspace, its own activity's
#: time on /tmp (a file made and deleted), a mode (WASI may not let it), then reports what it left.
PLANT = (
    "import os\n"
    f"os.utime('/workspace', ({PLANTED}, {PLANTED}))\n"
    "open('/tmp/t', 'w').close()\nos.remove('/tmp/t')\n"
    "for d in ('/workspace', '/tmp'):\n"
    "    try:\n        os.chmod(d, 0o500)\n    except OSError:\n        pass\n"
    f"{LOOK}look"
)


def _sandbox(runtime: Runtime, spares: int) -> Sandbox:
    return Sandbox(Limits(timeout_ms=10_000), runtime=runtime, spares=spares)


@pytest.mark.parametrize("spares", [0, 1])
def test_a_run_sees_nothing_another_run_did_to_its_directories(runtime: Runtime, spares: int) -> None:
    sandbox = _sandbox(runtime, spares)
    key = SpareKey(sandbox.limits.fuel is not None, sandbox.limits.memory_bytes, True, None)
    try:
        fresh: Any = data_of(sandbox.run_sync(LOOK + "look"))
        planted: Any = data_of(sandbox.run_sync(PLANT))
        assert planted["/workspace"][0] == PLANTED  # the plant took
        if spares:  # ordered here: a refill may be skipped when runs come faster than spares are made
            sandbox.spares.fill(key)
            assert sandbox.spares.wait_ready(key, 30), sandbox.spares.stats()
        seen: Any = data_of(sandbox.run_sync(LOOK + "look"))
        if spares:
            assert sandbox.spares.stats().hits >= 1  # the spare path was the one tested
        for directory in ("/workspace", "/tmp"):
            mtime, mode, inode, size = seen[directory]
            assert mtime != planted[directory][0]
            assert mode == fresh[directory][1]  # as any new directory, whatever A did
            assert inode not in (planted["/workspace"][2], planted["/tmp"][2])
            assert size == fresh[directory][3]
    finally:
        sandbox.close()
