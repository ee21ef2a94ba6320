"""The state directory: everything a later request may need, on storage that several replicas may share.

``serve --state-dir DIR`` names it; every replica of a server set is pointed at the same DIR
(NFS, EFS, a ReadWriteMany volume). Its parts, each owned by one module::

    DIR/sessions/    sessions: sealed generations, owners, locks, PII vaults (`wasmexec._state.sessions`;
                     a session's vault is kept in its own directory, so it is removed with it)
    DIR/artifacts/   the artifacts behind wasmexec:// resources (`wasmexec._state.shared_artifacts`)
    DIR/vaults/      reserved (made, unused)
    DIR/approvals/   paused 2026 approvals: single-use nonces, idempotency records, call logs

Locks are taken on the storage (``flock`` on files there), never only in memory, so two
replicas never act on one item at once. Whatever is sensitive is sealed with the state key
(`wasmexec._state.key`). The directory and its parts are private to the server's user (0700).
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

from wasmexec._exceptions import ConfigError
from wasmexec._state.key import StateKey

PARTS = ("sessions", "artifacts", "vaults", "approvals")


class StateDir:
    """A state directory and the key that seals what it holds."""

    def __init__(self, root: str | os.PathLike[str], key: StateKey) -> None:
        """Makes `root` and its parts (0700) if missing.

        Raises:
            ConfigError: it cannot be made, is not a directory, or others may write it.
        """
        self.root = Path(root)
        self.key = key
        for part in (self.root, *(self.root / name for name in PARTS)):
            try:
                part.mkdir(mode=0o700, parents=True, exist_ok=True)
                info = part.stat()
            except OSError as exc:
                raise ConfigError(f"state directory {part}: {exc.strerror or exc}") from None
            if not stat.S_ISDIR(info.st_mode):
                raise ConfigError(f"state directory {part} is not a directory")
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
                raise ConfigError(f"state directory {part} is writable by others; run `chmod go-w {part}`")

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def vaults(self) -> Path:
        return self.root / "vaults"

    @property
    def approvals(self) -> Path:
        return self.root / "approvals"


def remove_now(directory: Path, root: Path) -> None:
    """Removes `directory` (in `root`) at once for every process: renamed away, then deleted.

    A reader on any replica finds it whole or not at all; a removal cut short by a crash leaves a
    ``.trash-*`` directory that the next sweep of `root` deletes. `shutil.rmtree` follows no symlink.
    """
    trash = root / f".trash-{secrets.token_hex(8)}"
    try:
        os.rename(directory, trash)
    except OSError:
        return  # gone already (another process removed it)
    shutil.rmtree(trash, ignore_errors=True)
