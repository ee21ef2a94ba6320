"""The `files` argument of run_python: decoded, and refused with a message that names the problem."""

from __future__ import annotations

import pytest

from wasmexec import Limits
from wasmexec._server.description import MAX_INPUT_BYTES
from wasmexec._server.inputs import FilesError, decode_files


def test_text_and_base64_entries_decode_to_bytes() -> None:
    files = decode_files([{"path": "a.txt", "text": "héllo"}, {"path": "d/b.bin", "base64": "AAEC/w=="}], Limits())
    assert files == {"a.txt": "héllo".encode(), "d/b.bin": b"\x00\x01\x02\xff"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"path": "../x", "text": ""}, "files[0]: workspace path '../x'"),
        ({"path": "/etc/passwd", "text": ""}, "must be relative"),
        ({"path": "a"}, "exactly one of 'text' and 'base64'"),
        ({"path": "a", "text": "x", "base64": "eA=="}, "exactly one of 'text' and 'base64'"),
        ({"path": "a", "base64": "not base64!"}, "not valid base64"),
        ({"path": "a", "text": "\ud800"}, "lone surrogate"),
    ],
)
def test_a_bad_entry_is_refused_with_its_index_and_reason(entry: dict[str, str], message: str) -> None:
    with pytest.raises(FilesError, match=r"files\[0\]") as caught:
        decode_files([entry], Limits())
    assert message in str(caught.value)


def test_a_path_given_twice_is_refused() -> None:
    with pytest.raises(FilesError, match="given twice"):
        decode_files([{"path": "a", "text": "1"}, {"path": "a", "text": "2"}], Limits())


def test_base64_over_the_total_is_refused_from_its_length_before_decoding() -> None:
    # Not valid base64 at all: only the length can have refused it.
    huge = "!" * (MAX_INPUT_BYTES // 3 * 4 + 8)
    with pytest.raises(FilesError, match="more than the 16777216 bytes allowed"):
        decode_files([{"path": "a", "base64": huge}], Limits(workspace_mb=1024))


def test_the_total_counts_every_file_and_the_workspace_limit_lowers_it() -> None:
    limits = Limits(workspace_mb=1)
    half = "x" * (512 * 1024)
    decode_files([{"path": "a", "text": half}, {"path": "b", "text": half}], limits)
    with pytest.raises(FilesError, match=r"files\[2\].*1048576 bytes"):
        decode_files([{"path": "a", "text": half}, {"path": "b", "text": half}, {"path": "c", "text": "!"}], limits)


def test_more_files_than_the_workspace_holds_are_refused() -> None:
    with pytest.raises(FilesError, match="at most 2"):
        decode_files([{"path": f"f{i}", "text": ""} for i in range(3)], Limits(workspace_files=2))
