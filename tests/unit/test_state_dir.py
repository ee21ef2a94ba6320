"""The state directory: made private with its parts; one that others may write is refused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from wasmexec._exceptions import ConfigError
from wasmexec._state.directory import PARTS, StateDir
from wasmexec._state.key import StateKey


def test_the_parts_are_made_private_and_named(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state", StateKey.ephemeral())
    for name in PARTS:
        part = getattr(state, name)
        assert part == tmp_path / "state" / name
        assert stat.S_IMODE(part.stat().st_mode) == 0o700
    StateDir(tmp_path / "state", StateKey.ephemeral())  # a second replica on the same directory


def test_a_state_dir_others_may_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        StateDir(tmp_path / "open", StateKey.ephemeral())


def test_a_file_in_the_way_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="state directory"):
        StateDir(tmp_path / "file", StateKey.ephemeral())
