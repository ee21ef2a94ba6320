"""Artifacts as MCP resources: their URIs, `resources/list` and `resources/read`, and the result's content blocks.

Every artifact a run keeps gets the URI ``wasmexec://runs/<run_id>/<path>`` (the path
percent-encoded, ``/`` kept). Artifacts of session runs too: a URI names what that run
wrote, and never changes; the session's files themselves are not resources (the next
run of the session sees them). The bytes live in the sandbox's `ArtifactStore`, which
bounds retention (count, bytes, age; least recently used first); with a state directory that
is a `SharedArtifactStore`, which also keeps who ran each run, so any replica lists and reads
a caller's artifacts.

Each run's artifacts belong to the caller that ran it (`callers.caller_key`): only that
caller lists or reads them. A caller that cannot be told apart (2026-era HTTP without
auth) lists nothing, and reads by URI: the run id in it (122 random bits) is the capability.
"""

from __future__ import annotations

import base64
import re
import threading
from collections.abc import Iterator
from urllib.parse import quote, unquote

from mcp import MCPError
from mcp.types import (
    INVALID_PARAMS,
    BlobResourceContents,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ListResourcesResult,
    ReadResourceResult,
    Resource,
    ResourceLink,
    TextResourceContents,
)

from wasmexec._envelope import RunResult
from wasmexec._state.shared_artifacts import SharedArtifactStore
from wasmexec._workspace.store import ArtifactStore, StoredArtifact

URI_PREFIX = "wasmexec://runs/"
#: PNG and JPEG up to this size are also shown inline (as image content) so a model sees the chart it drew.
MAX_INLINE_IMAGE_BYTES = 256 * 1024
#: Text files (CSV, JSON, Markdown, SVG, …) up to this size are also embedded as text.
MAX_INLINE_TEXT_BYTES = 16 * 1024
#: What one result embeds at most, over all its artifacts: a result is read by a model.
MAX_INLINE_TOTAL_BYTES = 1024 * 1024
MAX_INLINE_ITEMS = 8
#: A result links at most this many artifacts (all are in structuredContent and in resources/list).
MAX_LINKS = 100
#: resources/list returns pages of this many.
PAGE_SIZE = 200
#: Runs whose owner is remembered: more than the store keeps (it forgets the oldest first too).
MAX_OWNED_RUNS = 10_000

_IMAGE_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
_TEXT_TYPES = {"application/json", "application/xml", "application/javascript", "application/x-sh",
               "application/yaml", "application/toml", "image/svg+xml"}  # fmt: skip
_URI = re.compile(r"wasmexec://runs/([A-Za-z0-9_-]{1,128})/(.+)", re.DOTALL)


def artifact_uri(run_id: str, path: str) -> str:
    return URI_PREFIX + run_id + "/" + quote(path, safe="/")


def _is_text(mime_type: str) -> bool:
    return mime_type.startswith("text/") or mime_type in _TEXT_TYPES


class ArtifactResources:
    """The artifacts a server's runs kept, bound to the callers that ran them."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._owners: dict[str, str | None] = {}  # run_id -> caller, oldest first

    def keep(self, run_id: str, caller: str | None) -> None:
        """Records who ran `run_id` (its artifacts are already in the store)."""
        if isinstance(self.store, SharedArtifactStore):  # on disk, for every replica
            self.store.set_owner(run_id, caller)
            return
        with self._lock:
            self._owners[run_id] = caller
            while len(self._owners) > MAX_OWNED_RUNS:
                del self._owners[next(iter(self._owners))]

    def _runs_of(self, caller: str) -> list[str]:
        if isinstance(self.store, SharedArtifactStore):
            return self.store.runs_of(caller)
        with self._lock:
            return [run_id for run_id, owner in self._owners.items() if owner == caller]

    def _owned(self, run_id: str, caller: str | None) -> bool:
        if isinstance(self.store, SharedArtifactStore):
            return self.store.owned_by(run_id, caller)
        with self._lock:
            return run_id in self._owners and self._owners[run_id] == caller

    def _stored(self, uri: str, caller: str | None) -> StoredArtifact:
        match = _URI.fullmatch(uri)
        if match is None or not self._owned(match[1], caller):
            raise _not_found(uri)
        try:
            return self.store.get(match[1], unquote(match[2]))
        except KeyError:
            raise _not_found(uri) from None

    def page(self, caller: str | None, cursor: str | None) -> ListResourcesResult:
        """A page of the caller's live artifacts (nothing for a caller that cannot be told apart)."""
        kept = self.store.list(self._runs_of(caller)) if caller is not None else []
        start = int(cursor) if cursor is not None and re.fullmatch("[0-9]{1,9}", cursor) else 0
        page = kept[start : start + PAGE_SIZE]
        resources = [Resource(name=a.path, uri=artifact_uri(a.run_id, a.path), mime_type=a.mime_type, size=a.size)
                     for a in page]  # fmt: skip
        more = start + PAGE_SIZE < len(kept)
        return ListResourcesResult(resources=resources, next_cursor=str(start + PAGE_SIZE) if more else None)

    def read(self, uri: str, caller: str | None) -> ReadResourceResult:
        """One artifact's bytes: text for text types that are valid UTF-8, else base64.

        Raises:
            MCPError: INVALID_PARAMS (-32602) when the URI is not one of the caller's live artifacts.
        """
        artifact = self._stored(uri, caller)
        try:
            data = self.store.read(artifact.run_id, artifact.path)
        except KeyError:
            raise _not_found(uri) from None
        text = _text(data, artifact.mime_type)
        contents: TextResourceContents | BlobResourceContents
        if text is not None:
            contents = TextResourceContents(uri=uri, mime_type=artifact.mime_type, text=text)
        else:
            contents = BlobResourceContents(uri=uri, mime_type=artifact.mime_type,
                                            blob=base64.b64encode(data).decode("ascii"))  # fmt: skip
        return ReadResourceResult(contents=[contents])

    def content(self, result: RunResult) -> list[ContentBlock]:
        """A link per kept artifact of the run, and small images and text files inline."""
        blocks: list[ContentBlock] = []
        inline: list[ContentBlock] = []
        budget = MAX_INLINE_TOTAL_BYTES
        for artifact in self._kept(result):
            uri = artifact_uri(artifact.run_id, artifact.path)
            blocks.append(ResourceLink(name=artifact.path, uri=uri, mime_type=artifact.mime_type, size=artifact.size))
            if len(inline) < MAX_INLINE_ITEMS and artifact.size <= budget:
                block = self._inline(artifact, uri)
                if block is not None:
                    inline.append(block)
                    budget -= artifact.size
        return blocks + inline

    def _kept(self, result: RunResult) -> Iterator[StoredArtifact]:
        run_id = result["run_id"]
        for entry in result.get("artifacts", [])[:MAX_LINKS]:
            try:
                yield self.store.get(run_id, entry["path"])
            except KeyError:  # not kept (over the store's bounds, or already evicted): nothing to link to
                continue

    def _inline(self, artifact: StoredArtifact, uri: str) -> ContentBlock | None:
        magic = _IMAGE_MAGIC.get(artifact.mime_type)
        limit = MAX_INLINE_IMAGE_BYTES if magic is not None else MAX_INLINE_TEXT_BYTES
        if artifact.size > limit or (magic is None and not _is_text(artifact.mime_type)):
            return None
        try:
            data = self.store.read(artifact.run_id, artifact.path)
        except KeyError:
            return None
        if magic is not None:
            if not data.startswith(magic):  # the name says PNG; the bytes must agree
                return None
            return ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=artifact.mime_type)
        text = _text(data, artifact.mime_type)
        if text is None:
            return None
        return EmbeddedResource(resource=TextResourceContents(uri=uri, mime_type=artifact.mime_type, text=text))


def _text(data: bytes, mime_type: str) -> str | None:
    if not _is_text(mime_type):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _not_found(uri: str) -> MCPError:
    """One answer for unknown, expired and not-yours (SEP-2164: -32602), so no URI can be probed."""
    shown = uri if len(uri) <= 300 else uri[:300] + "…"
    return MCPError(INVALID_PARAMS, f"Resource not found: {shown}")
