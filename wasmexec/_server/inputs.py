"""The `files` argument of `run_python`: input files, checked and decoded before any run starts.

Each entry is ``{path, text}`` or ``{path, base64}``. Sizes are bounded *before* decoding
(base64 by its length, text by its character count, then its UTF-8 bytes), so a huge
argument costs the check, not a decode. Every problem is an `FilesError` whose message
names the entry and what is wrong with it; the server answers it with -32602.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from wasmexec._limits import Limits
from wasmexec._server.description import MAX_INPUT_BYTES
from wasmexec._workspace.safefs import split_relative


class FilesError(ValueError):
    """An input file the server refuses (the message is shown to the client)."""


def decode_files(entries: list[dict[str, Any]], limits: Limits) -> dict[str, bytes]:
    """The input files by path, decoded; within `MAX_INPUT_BYTES` and the run's workspace limits.

    `entries` has already been checked against the input schema (a list of objects with a
    string `path` and optional string `text` / `base64`, nothing else).

    Raises:
        FilesError: a bad or repeated path, not exactly one of text/base64, invalid base64,
            or more bytes or files than allowed.
    """
    budget = min(MAX_INPUT_BYTES, limits.workspace_bytes)
    if len(entries) > limits.workspace_files:
        raise FilesError(f"files: {len(entries)} files, but the workspace holds at most {limits.workspace_files}")
    files: dict[str, bytes] = {}
    used = 0
    for index, entry in enumerate(entries):
        where = f"files[{index}]"
        path = _path(entry["path"], where)
        if path in files:
            raise FilesError(f"{where}: path {path!r} is given twice")
        data = _content(entry, where, budget - used, budget)
        used += len(data)
        files[path] = data
    return files


def _path(path: str, where: str) -> str:
    try:
        split_relative(path)
    except ValueError as exc:
        raise FilesError(f"{where}: {exc}") from None
    return path


def _content(entry: dict[str, Any], where: str, room: int, budget: int) -> bytes:
    """The entry's bytes, refused as soon as it is known to be larger than `room`."""
    text: str | None = entry.get("text")
    encoded: str | None = entry.get("base64")
    data: bytes
    if (text is None) == (encoded is None):
        raise FilesError(f"{where}: give exactly one of 'text' and 'base64'")
    if text is not None:
        if len(text) > room:  # every character is at least one byte
            raise _too_big(where, budget)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise FilesError(f"{where}: 'text' is not valid Unicode (a lone surrogate); send it as 'base64'") from None
    elif encoded is not None:
        if len(encoded) // 4 * 3 > room + 3:  # the decoded size, known from the length alone
            raise _too_big(where, budget)
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise FilesError(f"{where}: 'base64' is not valid base64 (RFC 4648, with padding)") from None
    if len(data) > room:
        raise _too_big(where, budget)
    return data


def _too_big(where: str, budget: int) -> FilesError:
    return FilesError(
        f"{where}: the input files take more than the {budget} bytes allowed in total (at most "
        f"{MAX_INPUT_BYTES} bytes per call, and no more than the workspace limit)"
    )
