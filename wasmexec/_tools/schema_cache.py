"""The tool-schema cache of MCP servers: an LRU with a TTL in memory, persisted as one JSON file.

Listing the tools of a server means starting it (or a round trip), so schemas are kept
between runs and between processes. The file looks like::

    {"format": 1, "entries": {"<server id>:<fingerprint>": {"fetched_at": 1700000000.0, "value": {...}}}}

Every write re-reads the file under a file lock, merges (the newer ``fetched_at`` wins per
key), and replaces it atomically, so concurrent processes neither corrupt the file nor lose
each other's keys. A file that cannot be read or parsed is ignored with a warning and
replaced on the next write; a location that cannot be written leaves the cache in memory
only, with a warning. The cache never raises over its file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetools import LRUCache
from filelock import FileLock, Timeout

#: Enough for every server a user has configured, many times over; a few MB of JSON at most.
DEFAULT_MAX_ENTRIES = 1000
#: Tool lists change with server releases, rarely within a day; a stale list still serves on error.
DEFAULT_TTL_S = 24 * 3600
#: A writer holds the file lock for milliseconds; waiting longer means a stuck process, so skip the write.
LOCK_TIMEOUT_S = 10.0
#: The version of the file layout; a file with another number is ignored and rewritten.
FORMAT = 1

Warn = Callable[[str], None]


@dataclass(frozen=True)
class Entry:
    """One cached value and when it was fetched. Treat `value` as read-only."""

    value: dict[str, Any]
    """What the server returned, as JSON (a tool list, a server's capabilities...)."""
    fetched_at: float
    """When it was fetched, in seconds of the cache's clock (`time.time` unless injected)."""

    def age(self, now: float) -> float:
        """Seconds since the value was fetched."""
        return now - self.fetched_at


def cache_key(server_id: str, fingerprint: str) -> str:
    """The key of one server's schemas: its id and the fingerprint of its configuration."""
    return f"{server_id}:{fingerprint}"


def config_fingerprint(
    command: str | None,
    args: Sequence[str],
    url: str | None,
    env_names: Iterable[str],
    header_names: Iterable[str],
    cwd: str | None = None,
) -> str:
    """A sha256 hex digest of what decides which tools a server offers.

    Only the names of environment variables and headers enter it, never their values: those
    are secrets and the fingerprint ends up in a file. Name order does not matter; header
    names are case-insensitive.
    """
    canonical = {
        "v": 1,
        "command": command,
        "args": list(args),
        "url": url,
        "env": sorted(set(env_names)),
        "headers": sorted({name.lower() for name in header_names}),
    }
    if cwd is not None:  # the working directory can change what a stdio server offers
        canonical["cwd"] = cwd
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class SchemaCache:
    """Tool schemas by key, fresh for `ttl_s`, kept in memory and in a JSON file shared by processes.

    `get` returns fresh entries only; `get_stale` returns an entry of any age, for serving a
    known schema when the server cannot be reached. Expired entries stay until the LRU evicts
    them. Safe to use from several threads.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.time,
        warn: Warn | None = None,
    ) -> None:
        """Creates a cache; the file is read on first use.

        Args:
            path: The JSON file, shared with other processes; None keeps the cache in memory only.
            max_entries: Entries kept in memory and in the file; the least recently used go first
                in memory, the least recently fetched in the file.
            ttl_s: Age in seconds up to which an entry is fresh.
            clock: Wall-clock seconds; entries carry its time across processes, so not monotonic.
            warn: Receives one message per kind of file problem (read, write, lock), called with the
                cache locked, so it must not use the cache; defaults to a RuntimeWarning.
        """
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive integer, not {max_entries!r}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be positive, not {ttl_s!r}")
        self._path = path
        self._max_entries = max_entries
        self._ttl_s = ttl_s
        self._clock = clock
        self._warn = warn if warn is not None else warn_runtime
        self._memory: LRUCache[str, Entry] = LRUCache(max_entries)
        self._lock = threading.Lock()
        self._loaded = path is None
        self._writable = path is not None
        self._warned: set[str] = set()

    def get(self, key: str) -> Entry | None:
        """The entry under `key` if it is fresh (younger than `ttl_s`), else None."""
        with self._lock:
            self._load()
            entry = self._memory.get(key)
            if entry is None or entry.age(self._clock()) >= self._ttl_s:
                return None
            return entry

    def get_stale(self, key: str) -> Entry | None:
        """The entry under `key` whatever its age, else None; for when a fresh fetch failed."""
        with self._lock:
            self._load()
            return self._memory.get(key)

    def put(self, key: str, value: dict[str, Any]) -> Entry:
        """Stores `value` as fetched now, in memory and in the file.

        Raises:
            TypeError, ValueError: `value` is not JSON (nothing is stored).
        """
        value = json.loads(json.dumps(value, allow_nan=False))
        with self._lock:
            self._load()
            entry = Entry(value, self._clock())
            self._memory[key] = entry
            self._update_file(lambda entries: _keep_newer(entries, key, entry))
            return entry

    def invalidate(self, key: str) -> None:
        """Drops the entry under `key` from memory and from the file."""
        with self._lock:
            self._load()
            self._memory.pop(key, None)
            self._update_file(lambda entries: entries.pop(key, None) is not None)

    def clear(self) -> None:
        """Drops every entry, from memory and from the file (other processes' entries included)."""
        with self._lock:
            self._loaded = True
            self._memory.clear()
            self._update_file(_drop_all)

    def __len__(self) -> int:
        """The number of entries held, fresh or stale."""
        with self._lock:
            self._load()
            return len(self._memory)

    def __contains__(self, key: object) -> bool:
        """Whether an entry is held under `key`, fresh or stale; `get` tells whether it is fresh."""
        with self._lock:
            self._load()
            return key in self._memory

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        entries = self._read_or_ignore()
        for key, entry in sorted(entries.items(), key=lambda item: item[1].fetched_at)[-self._max_entries :]:
            self._memory[key] = entry

    def _update_file(self, change: Callable[[dict[str, Entry]], bool]) -> None:
        """Read-merge-write under the file lock; `change` edits the entries and says whether to write."""
        if self._path is None or not self._writable:
            return
        path = self._path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # the cache dir also holds compiled code
            with FileLock(path.with_name(path.name + ".lock"), timeout=LOCK_TIMEOUT_S):
                entries = self._read_or_ignore()
                if change(entries):
                    _write_file(path, _newest(entries, self._max_entries))
        except Timeout:
            self._warn_once("lock", f"schema cache {path} is locked by another process; an update was skipped")
        except OSError as exc:
            self._writable = False
            self._warn_once(
                "write", f"schema cache {path} cannot be written ({_reason(exc)}); keeping it in memory only"
            )

    def _read_or_ignore(self) -> dict[str, Entry]:
        assert self._path is not None
        try:
            return _read_file(self._path)
        except _Unusable as exc:
            self._warn_once("read", f"schema cache {self._path} {exc}; ignoring it")
            return {}

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            self._warn(message)


class _Unusable(Exception):
    """The file exists but cannot be used; the message says why."""


def _read_file(path: Path) -> dict[str, Entry]:
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as exc:
        raise _Unusable(f"cannot be read ({_reason(exc)})") from exc
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _Unusable("is not valid JSON") from exc
    return _parse(document)


def _parse(document: object) -> dict[str, Entry]:
    if not isinstance(document, dict):
        raise _Unusable("is not a JSON object")
    number = document.get("format")
    if type(number) is not int or number != FORMAT:
        raise _Unusable(f"has format {number!r}, not {FORMAT}")
    raw_entries = document.get("entries")
    if not isinstance(raw_entries, dict):
        raise _Unusable("has no 'entries' object")
    return {key: _parse_entry(key, item) for key, item in raw_entries.items()}


def _parse_entry(key: str, item: object) -> Entry:
    if isinstance(item, dict):
        value, fetched_at = item.get("value"), item.get("fetched_at")
        if isinstance(fetched_at, bool) or not isinstance(fetched_at, int | float):
            raise _Unusable(f"has a malformed entry {key!r}")
        if isinstance(value, dict) and math.isfinite(fetched_at):
            return Entry(value, float(fetched_at))
    raise _Unusable(f"has a malformed entry {key!r}")


def _write_file(path: Path, entries: dict[str, Entry]) -> None:
    """Writes a temp file in the same directory, syncs it and renames it over `path` (atomic)."""
    document = {
        "format": FORMAT,
        "entries": {key: {"fetched_at": entry.fetched_at, "value": entry.value} for key, entry in entries.items()},
    }
    data = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _keep_newer(entries: dict[str, Entry], key: str, entry: Entry) -> bool:
    current = entries.get(key)
    if current is None or current.fetched_at <= entry.fetched_at:
        entries[key] = entry
    return True


def _drop_all(entries: dict[str, Entry]) -> bool:
    entries.clear()
    return True


def _newest(entries: dict[str, Entry], limit: int) -> dict[str, Entry]:
    if len(entries) <= limit:
        return entries
    ranked = sorted(entries.items(), key=lambda item: item[1].fetched_at, reverse=True)
    return dict(ranked[:limit])


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def warn_runtime(message: str) -> None:
    """The default `warn`: a RuntimeWarning naming wasmexec."""
    warnings.warn(f"wasmexec: {message}", RuntimeWarning, stacklevel=4)
