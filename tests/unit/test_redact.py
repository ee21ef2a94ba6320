import pytest

from wasmexec import Redactor
from wasmexec._redact import MARKER

KEYS = [
    "sk-" + "a1B2" * 12,
    "sk-proj-" + "Zx9_" * 8,
    "sk-ant-api03-" + "q" * 40,
    "ghp_" + "A" * 36,
    "github_pat_" + "b" * 30,
    "AKIA" + "ABCDEFGHIJKLMNOP",
    "AIza" + "x" * 35,
    "xoxb-" + "1234567890-abcdef",
    "sk_live_" + "9" * 24,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
]


@pytest.mark.parametrize("key", KEYS)
def test_common_key_formats_are_redacted_inside_text(key: str) -> None:
    text, count = Redactor().redact_text(f"token={key} end")
    assert key not in text
    assert MARKER in text
    assert count == 1


def test_a_bearer_token_is_redacted_but_the_word_bearer_stays() -> None:
    text, _ = Redactor().redact_text("Authorization: Bearer abcdefghijklmnop1234")
    assert text == f"Authorization: Bearer {MARKER}"


def test_ordinary_text_is_left_alone() -> None:
    text = "sk-short, task-1234, the skies are blue, AKIA is a word"
    assert Redactor().redact_text(text) == (text, 0)


def test_a_registered_secret_is_redacted_everywhere_in_a_nested_value() -> None:
    redactor = Redactor(["hunter2-secret"])
    value = {"a": ["x hunter2-secret y", {"hunter2-secret": 1}], "n": 5, "b": None}
    cleaned, count = redactor.redact(value)
    assert cleaned == {"a": [f"x {MARKER} y", {MARKER: 1}], "n": 5, "b": None}
    assert count == 2


def test_secrets_too_short_to_be_secrets_are_ignored() -> None:
    redactor = Redactor(["abc", ""])
    assert redactor.redact_text("abc") == ("abc", 0)


def test_overlapping_secrets_redact_the_longest_match() -> None:
    redactor = Redactor(["secret-value", "secret-value-long"])
    assert redactor.redact_text("secret-value-long") == (MARKER, 1)
