"""Artifacts as MCP resources: URIs for any file name, binding to the caller, and what a result inlines."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import MCPError
from mcp.types import BlobResourceContents, EmbeddedResource, ImageContent, ResourceLink, TextResourceContents

from wasmexec._envelope import Artifact, RunResult
from wasmexec._server.resources import MAX_INLINE_IMAGE_BYTES, ArtifactResources, artifact_uri
from wasmexec._workspace.artifacts import mime_type
from wasmexec._workspace.store import ArtifactStore

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def resources(tmp_path: Path) -> Iterator[ArtifactResources]:
    (tmp_path / "store").mkdir()
    store = ArtifactStore(tmp_path / "store")
    yield ArtifactResources(store)
    store.close()


def _run(resources: ArtifactResources, workspace: Path, run_id: str, files: dict[str, bytes], caller: str | None
         ) -> RunResult:  # fmt: skip
    artifacts: list[Artifact] = []
    for name, data in files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_bytes(data)
        artifacts.append({"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                          "mime_type": mime_type(name, data[:16])})  # fmt: skip
    resources.store.put(run_id, workspace, artifacts)
    resources.keep(run_id, caller)
    return {"run_id": run_id, "artifacts": artifacts}  # type: ignore[typeddict-item]


def test_any_file_name_makes_a_uri_that_reads_back(resources: ArtifactResources, tmp_path: Path) -> None:
    name = "out dir/chart #1 100%?ü.csv"
    _run(resources, tmp_path / "ws", "run1", {name: b"a,b\n"}, "me")
    uri = artifact_uri("run1", name)
    assert uri == "wasmexec://runs/run1/out%20dir/chart%20%231%20100%25%3F%C3%BC.csv"
    (contents,) = resources.read(uri, "me").contents
    assert isinstance(contents, TextResourceContents) and contents.text == "a,b\n"
    assert [str(r.uri) for r in resources.page("me", None).resources] == [uri]


def test_binary_artifacts_read_as_base64(resources: ArtifactResources, tmp_path: Path) -> None:
    _run(resources, tmp_path / "ws", "run1", {"data.bin": b"\x00\xff", "bad.csv": b"\xff\xfe"}, "me")
    for name, data in (("data.bin", b"\x00\xff"), ("bad.csv", b"\xff\xfe")):  # not UTF-8: a blob, whatever the type
        (contents,) = resources.read(artifact_uri("run1", name), "me").contents
        assert isinstance(contents, BlobResourceContents) and base64.b64decode(contents.blob) == data


@pytest.mark.parametrize(("owner", "caller"), [("me", "you"), ("me", None), (None, "me")])
def test_only_the_caller_that_ran_it_reads_an_artifact(
    resources: ArtifactResources, tmp_path: Path, owner: str | None, caller: str | None
) -> None:
    _run(resources, tmp_path / "ws", "run1", {"a.txt": b"secret"}, owner)
    with pytest.raises(MCPError) as caught:
        resources.read(artifact_uri("run1", "a.txt"), caller)
    assert caught.value.code == -32602 and caught.value.message.startswith("Resource not found")
    assert resources.page(caller, None).resources == []


def test_a_caller_that_cannot_be_told_apart_lists_nothing_but_reads_by_uri(
    resources: ArtifactResources, tmp_path: Path
) -> None:
    _run(resources, tmp_path / "ws", "run1", {"a.txt": b"x"}, None)
    assert resources.page(None, None).resources == []
    assert resources.read(artifact_uri("run1", "a.txt"), None).contents[0].text == "x"  # type: ignore[union-attr]


OTHER_URIS = ["wasmexec://runs/run1/missing.txt", "wasmexec://runs/run1/", "wasmexec://runs/../x",
              "wasmexec://runs/run1/a.txt/../a.txt", "file:///etc/passwd", "x" * 10_000]  # fmt: skip


@pytest.mark.parametrize("uri", OTHER_URIS)
def test_any_other_uri_is_not_found(resources: ArtifactResources, tmp_path: Path, uri: str) -> None:
    _run(resources, tmp_path / "ws", "run1", {"a.txt": b"x"}, "me")
    with pytest.raises(MCPError) as caught:
        resources.read(uri, "me")
    assert caught.value.code == -32602 and len(caught.value.message) < 400


def test_a_result_links_every_artifact_and_inlines_only_small_images_and_text(
    resources: ArtifactResources, tmp_path: Path
) -> None:
    big_png = PNG + b"\x00" * MAX_INLINE_IMAGE_BYTES
    files = {"chart.png": PNG, "big.png": big_png, "fake.png": b"GIF89a....", "notes.md": b"# hi", "a.bin": b"\x00"}
    result = _run(resources, tmp_path / "ws", "run1", files, "me")
    content = resources.content(result)
    assert sorted(b.name for b in content if isinstance(b, ResourceLink)) == sorted(files)
    (image,) = [b for b in content if isinstance(b, ImageContent)]
    assert base64.b64decode(image.data) == PNG
    (text,) = [b for b in content if isinstance(b, EmbeddedResource)]
    assert text.resource.text == "# hi" and text.resource.mime_type == "text/markdown"  # type: ignore[union-attr]


def test_a_junk_cursor_starts_at_the_first_page(resources: ArtifactResources, tmp_path: Path) -> None:
    _run(resources, tmp_path / "ws", "run1", {"a.txt": b"x"}, "me")
    for cursor in ("9" * 5000, "²", "-1", "abc"):
        assert len(resources.page("me", cursor).resources) == 1
