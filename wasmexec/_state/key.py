"""The state key: one secret that seals whatever a later request, or another replica, reads back.

Every replica of a server set is given the same key file (``--state-key-file``): a secret of
at least 32 bytes, such as the 64 hex characters ``openssl rand -hex 32`` writes (the file's
bytes, surrounding whitespace stripped, are the secret; hex is not decoded). The file must be
readable by its owner only. Each use gets its own key, derived with HKDF-SHA256 and a purpose
label, so a value sealed for one purpose never opens as another. Sealing is AES-256-GCM with
a random 96-bit nonce; the associated data binds a sealed value to where it belongs (a session
id, a path), so one cannot be swapped for another.

Without a key file, `StateKey.ephemeral()` makes a random key that lives as long as the process:
what it sealed cannot be opened after a restart or by another process. `StateKey.kept_in(DIR)`
is a key a state directory keeps for itself (``DIR/state.key``), for one server on its own
directory (see there).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from wasmexec._exceptions import ConfigError
from wasmexec._secretfile import read_secret_file

#: The shortest secret accepted: 256 bits, AES-256's key size.
MIN_SECRET_BYTES = 32
#: A key file larger than this is not a key (a misnamed file); refused before it is read whole.
MAX_KEY_FILE_BYTES = 4096
_NONCE_BYTES = 12
_VERSION = b"\x01"
_INFO_PREFIX = b"wasmexec state key v1: "
#: The key a state directory keeps for itself when no key file is given (`StateKey.kept_in`).
LOCAL_KEY_NAME = "state.key"


class SealError(Exception):
    """A sealed value does not open: tampered with, sealed under another key or purpose, or cut short."""


class StateKey:
    """The secret behind every seal of a server (see the module). Immutable; safe to share between threads."""

    def __init__(self, secret: bytes, *, source: str) -> None:
        """
        Args:
            secret: at least `MIN_SECRET_BYTES` bytes.
            source: where it came from, for messages (a path, or "ephemeral").
        """
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"a state key needs at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
        self._secret = bytes(secret)
        self.source = source
        self.shared = source != "ephemeral"
        """Whether it came from a file (other replicas and later processes may hold it too)."""

    @classmethod
    def ephemeral(cls) -> StateKey:
        """A random key for this process only."""
        return cls(secrets.token_bytes(MIN_SECRET_BYTES), source="ephemeral")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> StateKey:
        """The key in `path` (see the module).

        Raises:
            ConfigError: the file is missing, readable or writable by others, too large, or too short.
        """
        data = read_secret_file(path, "state key file", MAX_KEY_FILE_BYTES)
        secret = data.strip()
        if len(secret) < MIN_SECRET_BYTES:
            raise ConfigError(f"state key file {path} holds {len(secret)} bytes; at least {MIN_SECRET_BYTES} are "
                              "needed (e.g. `openssl rand -hex 32 > FILE`)")  # fmt: skip
        return cls(secret, source=str(path))

    @classmethod
    def kept_in(cls, directory: str | os.PathLike[str]) -> StateKey:
        """The key in ``directory/LOCAL_KEY_NAME``, made (0600, random) on first use.

        For one server on its own state directory: what it seals outlives a restart without a
        key file to manage. Every process on the directory gets the same key (the first one
        makes it; a race is settled by an atomic link), so it protects nothing from someone
        who can read the directory: a set of replicas on a shared volume is given
        ``--state-key-file`` instead (a secret kept elsewhere).

        Raises:
            ConfigError: the directory cannot be made or written, or the file there is not a key.
        """
        directory = Path(directory)
        path = directory / LOCAL_KEY_NAME
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not path.exists():
                temporary = directory / f".{LOCAL_KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, secrets.token_hex(MIN_SECRET_BYTES).encode("ascii") + b"\n")
                    os.fsync(fd)
                finally:
                    os.close(fd)
                try:
                    os.link(temporary, path)  # never replaces a key another process made meanwhile
                except FileExistsError:
                    pass
                finally:
                    os.unlink(temporary)
        except OSError as exc:
            raise ConfigError(f"cannot make the state key {path}: {exc.strerror or exc}") from None
        return cls.from_file(path)

    def derive(self, purpose: str) -> bytes:
        """A 32-byte key for one purpose (e.g. ``"sessions"``, ``"request-state"``)."""
        info = _INFO_PREFIX + purpose.encode("utf-8")
        return HKDF(algorithm=SHA256(), length=32, salt=None, info=info).derive(self._secret)

    def sealer(self, purpose: str) -> Sealer:
        """Seals and opens values for one purpose."""
        return Sealer(self.derive(purpose))


class Sealer:
    """AES-256-GCM under one derived key: ``version | nonce | ciphertext+tag``."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, plaintext: bytes, bound_to: bytes = b"") -> bytes:
        """`plaintext` sealed; it opens only with the same `bound_to` (associated data, not secret)."""
        nonce = secrets.token_bytes(_NONCE_BYTES)
        return _VERSION + nonce + self._aead.encrypt(nonce, plaintext, bound_to)

    def open(self, sealed: bytes, bound_to: bytes = b"") -> bytes:
        """The plaintext of a `seal` result.

        Raises:
            SealError: it was changed, sealed under another key, purpose or `bound_to`, or is cut short.
        """
        if len(sealed) < 1 + _NONCE_BYTES + 16 or sealed[:1] != _VERSION:
            raise SealError("not a sealed value of this version")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, body, bound_to)
        except InvalidTag:
            raise SealError("the sealed value does not open with this key (tampered with, or another key)") from None
