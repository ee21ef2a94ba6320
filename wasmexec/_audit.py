"""The audit trail: one JSON line per run and per tool call, never code, arguments or results.

Lines carry digests (sha256) and sizes instead of content. Each line is written with
a single ``write`` on a file opened in append mode, so lines from concurrent runs and
processes never interleave; the file rotates by size (``audit.jsonl`` →
``audit.jsonl.1`` …) under a file lock. A log opened with a replica id (`serve
--replica-id`) puts it on every line, so the replicas of a set can share a log.


Lines of an authenticated caller's runs (``serve --http`` with auth) carry ``principal``:
the operator must be able to tell who ran what. It is the name the operator gave in the
token file, or ``subject @ issuer`` of a JWT; never the token.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

#: Rotate past this size; a busy server writes ~300 bytes per call.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: Rotated files kept (audit.jsonl.1 … .5).
DEFAULT_BACKUPS = 5

#: Who the current request acts for, as audit lines name it (set by `serve --http`'s auth gate; None
#: otherwise). A run takes it when it starts (`RunState.principal`), so lines written on other threads name it too.
PRINCIPAL: ContextVar[str | None] = ContextVar("wasmexec_principal", default=None)


def principal_field(principal: str | None) -> dict[str, str]:
    """``{"principal": …}`` for an audit line, or nothing when no one was authenticated."""
    return {"principal": principal} if principal is not None else {}


def digest(value: Any) -> str:
    """``sha256:`` of a value's canonical JSON (or of a str as UTF-8)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def default_audit_path() -> Path:
    """The per-user state directory (XDG_STATE_HOME on Linux)."""
    import sys

    if sys.platform == "linux":
        base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        return Path(base) / "wasmexec" / "audit.jsonl"
    import platformdirs

    return Path(platformdirs.user_state_dir("wasmexec")) / "audit.jsonl"


class AuditLog:
    """Appends audit lines to a JSONL file; thread- and process-safe; close is idempotent."""

    def __init__(
        self,
        path: Path | str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        backups: int = DEFAULT_BACKUPS,
        replica: str | None = None,
    ) -> None:
        self.path = Path(path)
        self._stamp = {"replica": replica} if replica is not None else {}
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # private: the audit trail

    def write(self, kind: str, **fields: Any) -> None:
        """Appends one line: ``{"time", "kind", "replica" (when named), **fields}``."""
        line = (
            json.dumps({"time": time.time(), "kind": kind, **self._stamp, **fields}, separators=(",", ":"), default=str)
            + "\n"
        )
        data = line.encode("utf-8", "surrogatepass")
        with self._lock:
            self._rotate_if_needed(len(data))
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(descriptor, data)
            finally:
                os.close(descriptor)

    def _rotate_if_needed(self, incoming: int) -> None:
        try:
            if self.path.stat().st_size + incoming <= self.max_bytes:
                return
        except FileNotFoundError:
            return
        from filelock import FileLock

        with FileLock(str(self.path) + ".lock", timeout=10):
            try:
                if self.path.stat().st_size + incoming <= self.max_bytes:
                    return  # another process rotated it
            except FileNotFoundError:
                return
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))


def write_run_line(audit: AuditLog, result: Any, redactions: int, principal: str | None = None) -> None:
    """The audit line of one finished run."""
    outcome = result["result"]
    audit.write(
        "run", run_id=result["run_id"], trace_id=result["trace_id"], code_digest=result["input_digest"],
        output_digest=result["output_digest"], duration_ms=result["duration_ms"],
        outcome="ok" if outcome["ok"] else outcome["error"]["type"], approval=result["approval_state"],
        tool_calls=outcome["metrics"]["tool_calls"], redactions=redactions, **principal_field(principal),
    )  # fmt: skip
