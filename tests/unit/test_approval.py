"""The approval question: what the user is shown is the whole call, with nothing hidden or disguised."""

from __future__ import annotations

import json

import pytest

from wasmexec._runctx.toolhost import HostCallError
from wasmexec._server.server import _question
from wasmexec._tools.approval import MAX_QUESTION_CHARS, approval_request, visible


def _ask(arguments: dict[str, object], *, annotations: dict[str, object] | None = None, tool: str = "wipe") -> str:
    return str(approval_request("files", tool, annotations or {}, arguments)["question"])


def test_every_argument_is_shown_in_full_however_it_is_padded() -> None:
    # The attack: pad the first path so a cut-off prompt hides the second one.
    paths = ["scratch/cache" + " " * 600, "home/user/documents"]
    question = _ask({"paths": paths})
    assert "home/user/documents" in question and ("scratch/cache" + " " * 600) in question
    assert "…" not in question


def test_the_question_names_the_call_and_says_when_it_is_destructive() -> None:
    question = _ask({"path": "a"}, annotations={"destructiveHint": True})
    assert "files.wipe" in question and "destructive" in question
    assert "destructive" not in _ask({"path": "a"}, tool="read")


@pytest.mark.parametrize(
    ("hidden", "shown"),
    [
        ("\u202e", "\\u202e"),  # right-to-left override: "gpj.exe" would display as "exe.jpg"
        ("\u2066", "\\u2066"),  # left-to-right isolate
        ("\u200b", "\\u200b"),  # zero-width space
        ("\u200f", "\\u200f"),  # right-to-left mark
        ("\ufeff", "\\ufeff"),  # byte order mark
        ("\u00ad", "\\u00ad"),  # soft hyphen (another Cf)
        ("\x1b", "\\u001b"),  # escape: terminal control sequences
        ("\x7f", "\\u007f"),  # DEL
        ("\x9b", "\\u009b"),  # C1 control sequence introducer
        ("\u2028", "\\u2028"),  # line separator
        ("\U000e0041", "\\udb40\\udc41"),  # a tag character, outside the BMP
    ],
)
def test_control_bidi_and_invisible_characters_are_made_visible(hidden: str, shown: str) -> None:
    question = _ask({"name": f"invoice{hidden}gpj.exe"})
    assert hidden not in question
    assert f"invoice{shown}gpj.exe" in question


def test_made_visible_arguments_still_read_as_the_same_json() -> None:
    arguments = {"name": "a\u202eb\x1bc\x7f\U000e0041", "n": [1, 2.5, None, True], "ключ": "значение 🙂"}
    shown = visible(json.dumps(arguments, ensure_ascii=False))
    assert json.loads(shown) == arguments
    assert "значение 🙂" in shown  # ordinary non-ASCII text stays readable


def test_names_from_the_server_are_made_visible_too() -> None:
    question = str(approval_request("files", "wipe\u202etxt.", {}, {})["question"])
    assert "\u202e" not in question and "wipe\\u202etxt." in question


def test_a_question_too_large_to_show_is_refused_with_the_reason() -> None:
    with pytest.raises(HostCallError) as refused:
        approval_request("files", "wipe", {}, {"paths": ["p" * 100] * 50})
    assert refused.value.kind == "denied"
    assert "too large to show" in refused.value.message and str(MAX_QUESTION_CHARS) in refused.value.message
    assert "--approve" in refused.value.hint


def test_a_question_just_under_the_cap_is_shown() -> None:
    size = len(_ask({"data": ""}))
    question = _ask({"data": "d" * (MAX_QUESTION_CHARS - size)})
    assert len(question) == MAX_QUESTION_CHARS


def test_the_request_carries_the_call_for_callers_that_render_their_own() -> None:
    request = approval_request("files", "wipe", {"destructiveHint": True}, {"path": "a"})
    assert request["server_id"] == "files" and request["tool_name"] == "wipe"
    assert request["arguments"] == {"path": "a"} and request["annotations"] == {"destructiveHint": True}


def test_wasmexec_serve_asks_the_brokers_question_unchanged() -> None:
    arguments = {"paths": ["scratch/cache" + " " * 600, "home/user/documents"], "x": "\u202e"}
    request = approval_request("files", "wipe", {"destructiveHint": True}, arguments)
    assert _question(request) == request["question"]
