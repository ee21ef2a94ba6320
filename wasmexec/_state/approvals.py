"""Approval records on the state directory: single-use states, the approved call's outcome, large logs.

A paused 2026-era approval is a sealed `request_state` (`wasmexec._server.replay`); what must
be shared between the replicas that may get its retries lives here::

    DIR/approvals/<expires>-<nonce>.lock   flock'ed by the replica replaying that state, for as
                                           long as the replay runs (the kernel drops the lock
                                           when that process dies, even by SIGKILL)
    DIR/approvals/<expires>-<nonce>.rec    sealed JSON: the approved call's state ("started",
                                           then its outcome) and the retry's final answer
    DIR/approvals/<expires>-log-<digest>   a log too large to travel in the state, sealed

`claim` is how a retry uses a state: the first one creates the record and holds the lock; a
second one while the first still runs is refused (`InUse`); a second one after it finished gets
the recorded answer (`Recorded`), and nothing runs again; one after a replica died mid-replay
takes over, and the approved call is then run at most once: "started" is written (and synced)
before the call and its outcome after it, so a crash between the two leaves "started", and the
takeover reports that the call may have run instead of running it again (at most once: a
destructive call is never repeated behind the user's back; the user decides what to do).

Everything is sealed with the state key (its "approvals" purpose) and bound to its file name,
so a record cannot be swapped for another. Names begin with their expiry (Unix seconds), so
`sweep` can remove expired ones without opening them. Locks are `flock` on the storage (on NFS
the Linux client maps them onto NFS locks), never only in memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmexec._runctx.journal import Outcome, decode_outcome, encode_outcome
from wasmexec._state.key import SealError, StateKey

#: Expired records are removed this long after their expiry (a retry in flight at expiry has finished).
SWEEP_GRACE_S = 60.0
#: Files `sweep` looks at per call: each pause sweeps a little, so no call pays for a large backlog.
SWEEP_BATCH = 64
_NONCE = re.compile(r"[A-Za-z0-9_-]{16,64}")


class Refused(Exception):
    """The record cannot be used (unreadable, sealed under another key, or missing)."""


class InUse(Exception):
    """Another retry of the same state is being replayed right now."""


@dataclass(frozen=True)
class Recorded:
    """The state was already used to the end: what its retry answered."""

    result: dict[str, Any]


#: What `Claim.before_call` returns when the approved call was started by a replica that died.
UNCERTAIN = object()


class ApprovalStore:
    """The approvals part of a state directory (or a private directory, for one process)."""

    def __init__(self, root: Path, key: StateKey) -> None:
        self.root = root
        self._sealer = key.sealer("approvals")

    def claim(self, nonce: str, expires: float) -> Claim | Recorded:
        """Uses the state `nonce` (see the module).

        Raises:
            InUse: another retry of it is being replayed.
            Refused: its record is unreadable.
        """
        if not _NONCE.fullmatch(nonce):
            raise Refused("not a nonce")
        stem = f"{int(expires)}-{nonce}"
        descriptor = os.open(self.root / f"{stem}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise InUse(nonce) from None
        claim = Claim(self, self.root / f"{stem}.rec", descriptor)
        try:
            record = claim.read()
        except BaseException:
            claim.release()
            raise
        if record is not None and record.get("result") is not None:
            claim.release()
            return Recorded(record["result"])
        if record is None:
            claim.write({"call": None, "result": None})
        return claim

    def put_log(self, data: bytes, expires: float) -> str:
        """Keeps a large log until `expires`; returns the name to fetch it by."""
        name = f"{int(expires)}-log-{hashlib.sha256(data).hexdigest()}"
        _write(self.root / name, self._sealer.seal(data, name.encode()))
        return name

    def get_log(self, name: str) -> bytes:
        """Raises Refused: no such log (expired, another store), or it does not open."""
        if not re.fullmatch(r"\d{1,12}-log-[0-9a-f]{64}", name):
            raise Refused("not a log name")
        try:
            data = self._sealer.open((self.root / name).read_bytes(), name.encode())
        except (OSError, SealError) as exc:
            raise Refused(f"log {name}: {exc}") from None
        if hashlib.sha256(data).hexdigest() != name.rsplit("-", 1)[1]:
            raise Refused(f"log {name}: digest mismatch")
        return data

    def sweep(self, now: float | None = None) -> None:
        """Removes up to `SWEEP_BATCH` expired files (any replica may; a missing file is fine)."""
        cutoff = (time.time() if now is None else now) - SWEEP_GRACE_S
        with contextlib.suppress(OSError), os.scandir(self.root) as entries:
            for seen, entry in enumerate(entries):
                if seen >= SWEEP_BATCH:
                    break
                expires = entry.name.split("-", 1)[0]
                if expires.isdigit() and int(expires) < cutoff:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)

    def seal(self, record: dict[str, Any], path: Path) -> bytes:
        return self._sealer.seal(json.dumps(record, separators=(",", ":")).encode(), path.name.encode())

    def open(self, data: bytes, path: Path) -> dict[str, Any]:
        try:
            record = json.loads(self._sealer.open(data, path.name.encode()))
        except (SealError, ValueError) as exc:
            raise Refused(f"record {path.name}: {exc}") from None
        if not isinstance(record, dict):
            raise Refused(f"record {path.name}: not a record")
        return record


class Claim:
    """One retry's hold on a state: its lock, and the approved call's record. `release` is idempotent."""

    def __init__(self, store: ApprovalStore, path: Path, descriptor: int) -> None:
        self._store = store
        self._path = path
        self._descriptor: int | None = descriptor

    def read(self) -> dict[str, Any] | None:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Refused(f"record {self._path.name}: {exc.strerror or exc}") from None
        return self._store.open(data, self._path)

    def write(self, record: dict[str, Any]) -> None:
        _write(self._path, self._store.seal(record, self._path))

    def before_call(self) -> Outcome | object | None:
        """None: the approved call may run (its start is now recorded); its recorded outcome when it ran
        to the end before; `UNCERTAIN` when it started on a replica that died before recording how it ended."""
        record = self.read() or {"call": None, "result": None}
        call = record.get("call")
        if isinstance(call, dict):
            try:
                return decode_outcome(call.get("outcome"))
            except ValueError:
                return UNCERTAIN
        if call is not None:
            return UNCERTAIN
        self.write({**record, "call": "started"})
        return None

    def after_call(self, outcome: Outcome) -> None:
        record = self.read() or {"result": None}
        self.write({**record, "call": {"outcome": encode_outcome(outcome)}})

    def finish(self, result: dict[str, Any]) -> None:
        """Records the retry's answer: a later retry of the same state gets it and nothing runs again."""
        record = self.read() or {"call": None}
        self.write({**record, "result": result})

    def release(self) -> None:
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is not None:
            os.close(descriptor)  # drops the flock


def _write(path: Path, data: bytes) -> None:
    """Atomically, and synced: a record must survive the crash of the replica that wrote it."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
