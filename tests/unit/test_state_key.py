"""The state key: loaded only from a private file of enough bytes; seals that open only where they belong."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wasmexec._exceptions import ConfigError
from wasmexec._state.key import MIN_SECRET_BYTES, SealError, StateKey


def _key_file(tmp_path: Path, content: bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "state.key"
    path.write_bytes(content)
    path.chmod(mode)
    return path


def test_a_hex_key_file_as_openssl_writes_it_loads_and_two_loads_seal_alike(tmp_path: Path) -> None:
    path = _key_file(tmp_path, b"ab" * 32 + b"\n")
    one, two = StateKey.from_file(path), StateKey.from_file(path)
    assert one.shared and one.source == str(path)
    sealed = one.sealer("sessions").seal(b"files", b"session-1")
    assert two.sealer("sessions").open(sealed, b"session-1") == b"files"  # another replica, same file


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (b"short\n", 0o600, f"at least {MIN_SECRET_BYTES} are needed"),
        (b"x" * 64, 0o640, "readable or writable by others"),
        (b"x" * 64, 0o602, "readable or writable by others"),
        (b"x" * 5000, 0o600, "not a key"),
    ],
)
def test_a_weak_or_exposed_key_file_is_refused_with_the_reason(
    tmp_path: Path, content: bytes, mode: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        StateKey.from_file(_key_file(tmp_path, content, mode))


def test_a_missing_key_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read state key file"):
        StateKey.from_file(tmp_path / "nope")


def test_a_directory_is_not_a_key_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir(mode=0o700)
    with pytest.raises(ConfigError):
        StateKey.from_file(tmp_path / "dir")


def test_a_seal_opens_only_with_the_same_key_purpose_and_binding() -> None:
    key = StateKey(os.urandom(32), source="test")
    sealed = key.sealer("vaults").seal(b"alice@example.com", b"session-A")
    assert b"alice" not in sealed
    with pytest.raises(SealError):
        key.sealer("vaults").open(sealed, b"session-B")  # swapped onto another session
    with pytest.raises(SealError):
        key.sealer("sessions").open(sealed, b"session-A")  # another purpose
    with pytest.raises(SealError):
        StateKey(os.urandom(32), source="other").sealer("vaults").open(sealed, b"session-A")
    tampered = bytearray(sealed)
    tampered[-1] ^= 1
    with pytest.raises(SealError):
        key.sealer("vaults").open(bytes(tampered), b"session-A")
    with pytest.raises(SealError):
        key.sealer("vaults").open(sealed[:20], b"session-A")


def test_an_ephemeral_key_is_new_in_every_process_and_not_shared() -> None:
    one, two = StateKey.ephemeral(), StateKey.ephemeral()
    assert not one.shared
    with pytest.raises(SealError):
        two.sealer("request-state").open(one.sealer("request-state").seal(b"x"))
