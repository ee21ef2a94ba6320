"""Write floods in /workspace and /tmp stop at the workspace limits, during the run, and leave the host clean."""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import limit_of
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._workspace import inotify
from wasmexec._workspace.rundir_pool import default_pool

MIB = 1024 * 1024
#: A flood that were not stopped would write until the timeout (gigabytes); one that is stopped
#: overshoots the cap by one epoch tick of writing (a few MiB). This bound tells the two apart
#: with a wide margin for a slow, loaded machine.
OVERSHOOT_BOUND = 96 * MIB

FLOODS = {
    "one big file": ("workspace_bytes", "f = open('big', 'wb')\nwhile True: f.write(b'0' * 1048576)"),
    "appends in a loop": (
        "workspace_bytes", "while True:\n    with open('log', 'ab') as f: f.write(b'0' * 65536)"),
    "many small files": ("workspace_files", "i = 0\nwhile True:\n    open(f'f{i}', 'w').write('x')\n    i += 1"),
    "files across new directories": (
        "workspace_files",
        "import os\ni = 0\nwhile True:\n    os.makedirs(f'd{i}/e', exist_ok=True)\n"
        "    open(f'd{i}/e/x', 'w').write('1')\n    i += 1",
    ),
    "a sparse file": ("workspace_bytes", "f = open('sparse', 'wb')\nf.seek(10**12)\nf.write(b'x')\nf.close()"),
    "truncate": ("workspace_bytes", "f = open('t', 'wb')\nf.truncate(10**12)\nf.close()"),
    "one pwrite": (
        "workspace_bytes",
        "import os\nfd = os.open('p', os.O_WRONLY | os.O_CREAT)\nos.pwrite(fd, b'0' * (24 * 1048576), 0)",
    ),
    "/tmp": ("workspace_bytes", "f = open('/tmp/big', 'wb')\nwhile True: f.write(b'0' * 65536)"),
    "a file deleted while open": (
        "workspace_bytes", "import os\nf = open('gone', 'wb')\nos.unlink('gone')\nwhile True: f.write(b'0' * 65536)"),
    "a temporary file": (
        "workspace_bytes", "import tempfile\nf = tempfile.TemporaryFile()\nwhile True: f.write(b'0' * 65536)"),
    "a rename loop": (
        "workspace_bytes",
        "import os\ni = 0\nwhile True:\n    open('n', 'wb').write(b'0' * 65536)\n"
        "    os.rename('n', f'r{i}')\n    i += 1",
    ),
}  # fmt: skip


#: Busy-waits past a few epoch ticks, so the quota's next check sees the state before going on.
_TICK = "import os, time\ndef tick():\n    end = time.monotonic() + 0.05\n    while time.monotonic() < end: pass\n"
#: 128 MiB through `f` if nothing stops it: bounded, so a quota that misses the file fails the test
#: (the run ends ok) instead of filling the disk.
_WRITE = "for _ in range(2048): f.write(b'0' * 65536)\n"

#: Files that leave the tree while open, in every way an inode can lose its names (each wrote
#: 128 MiB under an 8 MiB cap before the quota charged open files by inode).
HIDDEN_WRITES = {
    "a name used again after its deletion": (
        "kept = []\nfor _ in range(3):\n    f = open('x', 'wb')\n    os.unlink('x')\n    kept.append(f)\n    tick()\n"),
    "a name used again in /tmp": (
        "kept = []\nfor _ in range(3):\n    f = open('/tmp/x', 'wb')\n    os.unlink('/tmp/x')\n    kept.append(f)\n"
        "    tick()\n"),
    "a file renamed over while open": (
        "open('y', 'wb').close()\nos.rename('y', 'z')\ntick()\n"  # 'y' has vanished once already
        "f = open('x', 'wb')\ntick()\nopen('y', 'wb').close()\nos.rename('y', 'x')\ntick()\n"),
    "hard links removed one by one": (
        "f = open('a', 'wb')\nos.link('a', 'b')\ntick()\nos.unlink('a')\ntick()\nos.unlink('b')\ntick()\n"),
    "a directory holding an open file removed": (
        "os.mkdir('d')\ntick()\nf = open('d/x', 'wb')\ntick()\nos.unlink('d/x')\nos.rmdir('d')\ntick()\n"),
    "files created, written and deleted within one tick": (
        "kept = []\nfor _ in range(128):\n    f = open('x', 'wb')\n    f.write(b'0' * 1048576)\n    f.flush()\n"
        "    os.unlink('x')\n    kept.append(f)\nf = kept[0]\n"),
    "a deleted file open twice, one handle closed": (
        "f = open('x', 'wb')\ng = open('x', 'ab')\nos.unlink('x')\ntick()\ng.close()\ntick()\n"),
}  # fmt: skip


def _no_inotify(*args: object) -> None:
    raise OSError(24, "too many inotify instances (as when the user's limit is reached)")


@pytest.fixture(params=["inotify", "walk"])
def quota_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the quota sees changes: inotify events, or (when inotify cannot be had) a walk on every check."""
    if request.param == "walk":
        monkeypatch.setattr(inotify, "subscribe", _no_inotify)
    return str(request.param)


@pytest.fixture
def sandbox(runtime: Runtime) -> Sandbox:
    return Sandbox(Limits(timeout_ms=20_000, workspace_mb=8, workspace_files=200), runtime=runtime)


def _files_under(directory: Path) -> list[Path]:
    return [path for path in directory.rglob("*") if not path.is_dir()]


@pytest.mark.parametrize("flood", sorted(FLOODS))
def test_a_flood_fails_with_the_workspace_limit_and_leaves_nothing_on_the_host(sandbox: Sandbox, flood: str) -> None:
    limit, code = FLOODS[flood]
    # A byte flood of many files (the rename loop) can pass both limits within one tick; the file cap
    # is raised for byte floods so the limit under test is the one that stops them.
    files = sandbox.limits.workspace_files if limit == "workspace_files" else 100_000
    result = sandbox.run_sync(code, replace(sandbox.limits, workspace_files=files))
    assert limit_of(result) == limit
    assert result["artifacts"] == []  # nothing over the limit is hashed or kept
    assert default_pool().wait_idle()
    assert _files_under(default_pool().base) == []


@pytest.mark.parametrize("flood", ["one big file", "appends in a loop", "/tmp"])
def test_a_flood_is_stopped_during_the_run_near_the_cap(runtime: Runtime, tmp_path: Path, flood: str) -> None:
    sandbox = Sandbox(Limits(timeout_ms=20_000, workspace_mb=16), runtime=runtime)
    code = FLOODS[flood][1].replace("/tmp/big", "big")  # in place, so the bytes can be measured afterwards
    result = sandbox.run_sync(code, workspace=tmp_path)
    assert limit_of(result) == "workspace_bytes"
    written = sum(path.stat().st_size for path in _files_under(tmp_path))
    assert 16 * MIB < written < 16 * MIB + OVERSHOOT_BOUND


def test_the_limit_names_the_cap_and_how_to_raise_it(sandbox: Sandbox) -> None:
    result = sandbox.run_sync(FLOODS["one big file"][1])
    assert "8 MiB" in result["result"]["error"]["message"]
    assert "workspace_mb" in result["diagnostics"][-1]["hint"]
    many = sandbox.run_sync(FLOODS["many small files"][1])
    assert "200 entries" in many["result"]["error"]["message"]


def test_an_in_place_workspace_already_over_the_limit_does_not_run(runtime: Runtime, tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / str(i)).write_text("x")
    sandbox = Sandbox(Limits(timeout_ms=10_000, workspace_files=4), runtime=runtime)
    result = sandbox.run_sync("print('ran')", workspace=tmp_path)
    assert limit_of(result) == "workspace_files"
    assert result["logs"] == []


def test_every_run_gets_new_directories_and_the_quota_still_works(sandbox: Sandbox) -> None:
    # Runs that leave nothing behind used to get the same directories again (a covert channel).
    inodes = "import os\n[os.stat('/workspace').st_ino, os.stat('/tmp').st_ino]"
    seen: list[list[int]] = []
    for _ in range(6):
        result = sandbox.run_sync("import os\nopen('x', 'w').write('1')\nos.remove('x')\n" + inodes)
        assert result["artifacts"] == []
        seen.append(result["result"]["data"])
    # Never the last run's directories (the filesystem may reuse the numbers of long-removed ones).
    assert all(not set(now) & set(before) for before, now in itertools.pairwise(seen)), seen
    assert limit_of(sandbox.run_sync(FLOODS["one big file"][1])) == "workspace_bytes"
    for _ in range(6):
        after = sandbox.run_sync("import os\n[os.listdir('.'), os.listdir('/tmp')]")
        assert after["result"]["data"] == [[], []]


@pytest.mark.parametrize("attack", sorted(HIDDEN_WRITES))
def test_a_file_that_left_the_tree_while_open_is_charged_whatever_happened_to_its_names(
    sandbox: Sandbox, quota_path: str, attack: str
) -> None:
    result = sandbox.run_sync(_TICK + HIDDEN_WRITES[attack] + _WRITE)
    assert limit_of(result) == "workspace_bytes"
    assert default_pool().wait_idle()
    assert _files_under(default_pool().base) == []


def _inotify_instances() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += "inotify" in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return count


def test_runs_that_fail_in_every_way_leak_no_inotify_instance(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "sub").symlink_to("..")
    default_pool().wait_idle()
    before = _inotify_instances()
    for _ in range(10):
        with pytest.raises(ValueError):
            sandbox.run_sync("1", files={"sub/x": "x"}, workspace=tmp_path)
        sandbox.run_sync(FLOODS["many small files"][1])
        sandbox.run_sync("open('kept', 'w').write('x')")
        sandbox.run_sync("1")
    default_pool().wait_idle()
    assert _inotify_instances() <= max(before, 1)  # the one shared instance


def test_two_hundred_file_writing_runs_hold_one_inotify_instance_at_most(sandbox: Sandbox) -> None:
    # Each run used to hold an instance of its own, closed on the reaper thread more slowly than runs
    # started: a busy server sat at the user's whole limit (fs.inotify.max_user_instances, often 128).
    peak = 0
    for i in range(200):
        assert sandbox.run_sync(f"open('f{i}', 'w').write('x')")["result"]["ok"]
        peak = max(peak, _inotify_instances())
    assert default_pool().wait_idle()
    assert peak <= 1
    assert _inotify_instances() <= 1
