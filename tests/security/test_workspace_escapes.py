"""Escapes through the workspace: `..`, symlinks (absolute, relative, dangling, host-planted), hard links,
renames, device and proc paths all fail, and no host access to a workspace ever follows a guest's symlink."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import data_of
from wasmexec import Limits, Runtime, Sandbox

ATTEMPTS = {
    "read ..": "open('../secret.txt').read()",
    "read /workspace/..": "open('/workspace/../secret.txt').read()",
    "list ..": "__import__('os').listdir('..')",
    "chdir ..": "__import__('os').chdir('..')",
    "absolute symlink": "__import__('os').symlink('/etc/passwd', 'abs')",
    "absolute symlink inside": "__import__('os').symlink('/workspace/x', 'abs2')",
    "read a relative symlink out": "import os\nos.symlink('../secret.txt', 'rel')\nopen('rel').read()",
    "write a relative symlink out": "import os\nos.symlink('../new.txt', 'rel2')\nopen('rel2', 'w').write('x')",
    "read a deep symlink out": "import os\nos.symlink('../../../../etc/passwd', 'deep')\nopen('deep').read()",
    "symlinked dir out": "import os\nos.symlink('..', 'up')\nos.listdir('up')",
    "hard link out": "__import__('os').link('../secret.txt', 'hard')",
    "hard link /etc/passwd": "__import__('os').link('/etc/passwd', 'hard2')",
    "rename out": "import os\nopen('x', 'w').write('x')\nos.rename('x', '../moved.txt')",
    "rename to root": "import os\nopen('y', 'w').write('y')\nos.rename('y', '/moved.txt')",
    "rename the workspace": "__import__('os').rename('/workspace', '/elsewhere')",
    "remove the workspace": "__import__('os').rmdir('/workspace')",
    "/dev/null": "open('/dev/null', 'w').write('x')",
    "/dev/zero": "open('/dev/zero', 'rb').read(1)",
    "/proc/self/environ": "open('/proc/self/environ', 'rb').read()",
    "/etc/passwd": "open('/etc/passwd').read()",
    "mkfifo": "__import__('os').mkfifo('fifo')",
    "mknod": "__import__('os').mknod('node')",
    "tmp ..": "open('/tmp/../secret.txt').read()",
}


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A workspace directory next to a secret, holding symlinks a host (or an earlier run) left there."""
    (tmp_path / "secret.txt").write_text("top secret")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "host_abs_link").symlink_to("/etc/passwd")
    (workspace / "host_rel_link").symlink_to("../secret.txt")
    (workspace / "host_dotdot_dir").symlink_to("..")
    return workspace


@pytest.mark.parametrize("attempt", sorted(ATTEMPTS))
def test_every_way_out_of_the_workspace_fails(sandbox: Sandbox, planted: Path, attempt: str) -> None:
    result = sandbox.run_sync(ATTEMPTS[attempt], workspace=planted)
    assert not result["result"]["ok"], (attempt, result["result"])
    assert result["result"]["error"]["type"] in {"PermissionError", "FileNotFoundError", "OSError",
                                                 "AttributeError", "NotADirectoryError"}, result["result"]  # fmt: skip
    assert "top secret" not in str(result)
    assert (planted.parent / "secret.txt").read_text() == "top secret"
    assert sorted(p.name for p in planted.parent.iterdir()) == ["secret.txt", "ws"]


@pytest.mark.parametrize("link", ["host_abs_link", "host_rel_link", "host_dotdot_dir/secret.txt"])
def test_symlinks_a_host_planted_cannot_be_followed_by_the_guest(sandbox: Sandbox, planted: Path, link: str) -> None:
    result = sandbox.run_sync(f"open({link!r}).read()", workspace=planted)
    assert result["result"]["error"]["type"] == "PermissionError"
    assert "top secret" not in str(result) and "root:" not in str(result)


def test_a_hard_link_to_a_planted_symlink_is_another_symlink_and_never_an_artifact(
    sandbox: Sandbox, planted: Path
) -> None:
    result = sandbox.run_sync("import os\nos.link('host_rel_link', 'copy')\nopen('copy').read()", workspace=planted)
    assert result["result"]["error"]["type"] == "PermissionError"
    assert result["artifacts"] == []


def test_a_guests_dangling_symlinks_never_redirect_the_hosts_next_input_write(sandbox: Sandbox, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    plant = "import os\nos.symlink('../victim.txt', 'data.csv')\nos.symlink('../..', 'sub')"
    first = sandbox.run_sync(plant, workspace=workspace)
    assert first["result"]["ok"] and first["artifacts"] == []
    assert (workspace / "data.csv").is_symlink()  # the guest really made them on the host
    second = sandbox.run_sync("open('data.csv').read()", files={"data.csv": "a,b\n"}, workspace=workspace)
    assert data_of(second) == "a,b\n"
    assert victim.read_text() == "precious"
    with pytest.raises(ValueError, match="never followed"):
        sandbox.run_sync("1", files={"sub/x.csv": "pwned"}, workspace=workspace)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt", "ws"]


def test_a_symlink_swapped_in_for_a_directory_never_makes_the_quota_walk_outside(
    runtime: Runtime, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(300):
        (outside / str(i)).write_text("x")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = Sandbox(Limits(timeout_ms=10_000, workspace_files=50), runtime=runtime)
    code = (
        "import os, time\n"
        "for i in range(20):\n"
        "    os.mkdir(f'a{i}'); os.rename(f'a{i}', f'b{i}'); os.symlink('../outside', f'a{i}')\n"
        "    t = time.monotonic()\n"
        "    while time.monotonic() - t < 0.005: pass\n"  # let epoch ticks (and quota checks) happen
        "result = len(os.listdir('.'))"
    )
    assert data_of(sandbox.run_sync(code, workspace=workspace)) == 40
    assert len(list(outside.iterdir())) == 300


def test_artifacts_are_read_without_following_symlinks(sandbox: Sandbox, planted: Path) -> None:
    code = "import os\nos.symlink('host_rel_link', 'chain')\nopen('real.txt', 'w').write('mine')"
    result = sandbox.run_sync(code, workspace=planted)
    assert [artifact["path"] for artifact in result["artifacts"]] == ["real.txt"]
    assert sandbox.read_artifact(result, "real.txt") == b"mine"
    for name in ("chain", "host_rel_link", "host_abs_link"):
        with pytest.raises(KeyError):
            sandbox.read_artifact(result, name)
