"""Files in, artifacts out, through the real component: Sandbox.run_sync / run with files= and workspace=."""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from pathlib import Path

import anyio
import pytest

from tests.helpers import data_of, diagnostic, error_of, limit_of
from wasmexec import ArtifactStore, Limits, Runtime, Sandbox
from wasmexec._workspace.rundir_pool import default_pool

SUMMARIZE = """
import csv, statistics
rows = list(csv.DictReader(open("data/temps.csv")))
mean = statistics.mean(float(r["temp"]) for r in rows)
with open("summary.csv", "w", newline="") as out:
    csv.writer(out).writerows([["rows", "mean_temp"], [len(rows), mean]])
result = {"rows": len(rows), "mean_temp": mean}
"""
TEMPS = "city,temp\nOslo,3\nRome,15\nLima,18\n"


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b"")
    )


def test_a_csv_given_as_input_is_read_summarized_and_the_summary_returned(sandbox: Sandbox) -> None:
    result = sandbox.run_sync(SUMMARIZE, files={"data/temps.csv": TEMPS})
    assert data_of(result) == {"rows": 3, "mean_temp": 12.0}
    summary = b"rows,mean_temp\r\n3,12.0\r\n"
    digest = hashlib.sha256(summary).hexdigest()
    assert result["artifacts"] == [{"path": "summary.csv", "size": len(summary), "sha256": digest,
                                    "mime_type": "text/csv"}]  # fmt: skip
    assert sandbox.read_artifact(result, "summary.csv") == summary
    assert sandbox.read_artifact(result["run_id"], "summary.csv") == summary


def test_inputs_can_be_bytes_text_or_a_host_file_and_are_not_artifacts_unless_changed(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    (tmp_path / "local.bin").write_bytes(b"\x00\x01")
    code = (
        "import os\n"
        "open('text.txt', 'a').write('!')\n"
        "result = [open('raw.bin', 'rb').read().hex(), open('text.txt').read(), open('copy.bin', 'rb').read().hex()]"
    )
    files = {"raw.bin": b"\xff", "text.txt": "héllo", "copy.bin": tmp_path / "local.bin"}
    result = sandbox.run_sync(code, files=files)
    assert data_of(result) == ["ff", "héllo!", "0001"]
    assert [artifact["path"] for artifact in result["artifacts"]] == ["text.txt"]


def test_tempfile_and_relative_paths_work_and_tmp_files_are_not_artifacts(sandbox: Sandbox) -> None:
    code = (
        "import os, tempfile, pathlib\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as t: t.write('scratch')\n"
        "with tempfile.TemporaryDirectory() as d: pathlib.Path(d, 'x').write_text('y')\n"
        "os.makedirs('out/deep', exist_ok=True)\n"
        "pathlib.Path('out/deep/r.json').write_text('{}')\n"
        "result = [os.getcwd(), tempfile.gettempdir(), os.path.abspath('out'), t.name.startswith('/tmp/')]"
    )
    result = sandbox.run_sync(code)
    assert data_of(result) == ["/workspace", "/tmp", "/workspace/out", True]
    assert [artifact["path"] for artifact in result["artifacts"]] == ["out/deep/r.json"]


def test_mime_types_come_from_the_name_and_images_must_have_their_magic_bytes(sandbox: Sandbox) -> None:
    png = _png()
    code = (
        f"open('chart.png', 'wb').write({png!r})\n"
        "open('fake.png', 'wb').write(b'<script>')\n"
        "open('notes.md', 'w').write('# x')\n"
        "open('blob', 'wb').write(b'?')\n"
    )
    result = sandbox.run_sync(code)
    types = {artifact["path"]: artifact["mime_type"] for artifact in result["artifacts"]}
    assert types == {"blob": "application/octet-stream", "chart.png": "image/png",
                     "fake.png": "application/octet-stream", "notes.md": "text/markdown"}  # fmt: skip
    assert sandbox.read_artifact(result, "chart.png") == png


def test_artifacts_are_listed_when_the_code_fails_after_writing(sandbox: Sandbox) -> None:
    result = sandbox.run_sync("open('partial.txt', 'w').write('half')\nraise ValueError('boom')")
    assert error_of(result)["type"] == "ValueError"
    assert [artifact["path"] for artifact in result["artifacts"]] == ["partial.txt"]


def test_artifacts_are_listed_when_the_run_hits_its_deadline(runtime: Runtime) -> None:
    sandbox = Sandbox(Limits(timeout_ms=300), runtime=runtime)
    result = sandbox.run_sync("with open('log.txt', 'w') as f: f.write('started')\nwhile True: pass")
    assert limit_of(result) == "timeout"
    assert [artifact["path"] for artifact in result["artifacts"]] == ["log.txt"]


def test_symlinks_are_never_artifacts_and_a_warning_says_so(sandbox: Sandbox) -> None:
    code = (
        "import os\nopen('real.txt', 'w').write('x')\n"
        "os.symlink('real.txt', 'link.txt')\nos.link('real.txt', 'hard.txt')"
    )
    result = sandbox.run_sync(code)
    assert [artifact["path"] for artifact in result["artifacts"]] == ["hard.txt"]  # one entry per inode
    assert "1 symlink" in diagnostic(result, "SYMLINKS_SKIPPED")["message"]


def test_inputs_over_the_workspace_limits_fail_the_run_before_the_code_starts(runtime: Runtime) -> None:
    sandbox = Sandbox(Limits(timeout_ms=10_000, workspace_mb=1, workspace_files=2), runtime=runtime)
    too_big = sandbox.run_sync("print('ran')", files={"big.bin": b"x" * (1024 * 1024 + 1)})
    assert limit_of(too_big) == "workspace_bytes"
    assert too_big["logs"] == []
    too_many = sandbox.run_sync("print('ran')", files={"a": "", "b": "", "c": ""})
    assert limit_of(too_many) == "workspace_files"
    in_dirs = sandbox.run_sync("print('ran')", files={"d/a": "", "e/b": ""})  # the directories count too
    assert limit_of(in_dirs) == "workspace_files"


@pytest.mark.parametrize("path", ["/etc/passwd", "../up", "a/../../b", "", "a//b", "./a"])
def test_an_input_path_outside_the_workspace_is_a_value_error(sandbox: Sandbox, path: str) -> None:
    with pytest.raises(ValueError):
        sandbox.run_sync("1", files={path: b"x"})


def test_bad_arguments_are_clear_errors(sandbox: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        sandbox.run_sync("1", files={"a": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="cannot read"):
        sandbox.run_sync("1", files={"a": tmp_path / "missing"})
    with pytest.raises(ValueError, match="not a directory"):
        sandbox.run_sync("1", workspace=tmp_path / "missing")
    with pytest.raises(KeyError):
        sandbox.read_artifact("no-such-run", "a")


def test_an_in_place_workspace_keeps_files_and_lists_only_what_changed(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "kept.txt").write_text("old")
    (tmp_path / "edited.txt").write_text("v1")
    first = sandbox.run_sync("open('edited.txt', 'w').write('v2')\nopen('new.txt', 'w').write('n')", workspace=tmp_path)
    assert [artifact["path"] for artifact in first["artifacts"]] == ["edited.txt", "new.txt"]
    second = sandbox.run_sync("sorted(__import__('os').listdir('.'))", workspace=tmp_path)
    assert data_of(second) == ["edited.txt", "kept.txt", "new.txt"]
    assert second["artifacts"] == []
    assert (tmp_path / "new.txt").read_text() == "n"  # copied to the store, not moved out
    assert sandbox.read_artifact(first, "edited.txt") == b"v2"


def test_the_per_run_workspace_is_gone_after_the_run(sandbox: Sandbox) -> None:
    marker = f"marker-{os.urandom(8).hex()}"
    result = sandbox.run_sync(f"open({marker!r}, 'w').write('x')\nopen('/tmp/' + {marker!r}, 'w').write('x')")
    assert [artifact["path"] for artifact in result["artifacts"]] == [marker]
    assert default_pool().wait_idle()
    left = [path for path in default_pool().base.rglob("*") if marker in path.name]
    assert left == []


def test_two_parallel_runs_never_see_each_others_workspace(runtime: Runtime) -> None:
    sandbox = Sandbox(Limits(timeout_ms=20_000), runtime=runtime)
    code = (
        "import os, time\n"
        "open(NAME, 'w').write(NAME)\n"
        "time.sleep(0.3)\n"
        "result = sorted(os.listdir('.')) + sorted(os.listdir('/tmp'))\n"
    )
    results: dict[str, object] = {}

    async def one(name: str) -> None:
        results[name] = await sandbox.run(f"NAME = {name!r}\n" + code)

    async def both() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(one, "a.txt")
            group.start_soon(one, "b.txt")

    anyio.run(both)
    assert data_of(results["a.txt"]) == ["a.txt"]
    assert data_of(results["b.txt"]) == ["b.txt"]


def test_a_sandbox_without_workspaces_refuses_files(runtime: Runtime) -> None:
    sandbox = Sandbox(runtime=runtime, workspaces=False)
    assert sandbox.run_sync("1 + 1")["artifacts"] == []
    with pytest.raises(ValueError, match="workspaces=False"):
        sandbox.run_sync("1", files={"a": b""})


def test_a_sandbox_keeps_artifacts_in_the_store_it_is_given(runtime: Runtime, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, max_artifacts=1)
    sandbox = Sandbox(Limits(timeout_ms=10_000), runtime=runtime, artifact_store=store)
    first = sandbox.run_sync("open('a', 'w').write('1')")
    second = sandbox.run_sync("open('b', 'w').write('2')")
    assert [(a.run_id, a.path) for a in store.list()] == [(second["run_id"], "b")]
    with pytest.raises(KeyError):
        sandbox.read_artifact(first, "a")
