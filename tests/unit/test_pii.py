"""PII detection, stable tokens, restoring tokens in tool arguments, and redaction without a way back."""

from __future__ import annotations

import time

import pytest

from wasmexec._tools.pii import PiiVault, iban_valid, luhn_valid

FOUND = [
    ("EMAIL", "Write to Jane.Doe+news@mail.example.co.uk today", "Jane.Doe+news@mail.example.co.uk"),
    ("PHONE", "call +49 30 1234 5678 now", "+49 30 1234 5678"),
    ("PHONE", "call (555) 123-4567 now", "(555) 123-4567"),
    ("PHONE", "call 555.123.4567 now", "555.123.4567"),
    ("CARD", "card 4111 1111 1111 1111 ok", "4111 1111 1111 1111"),
    ("CARD", "card 5500-0000-0000-0004 ok", "5500-0000-0000-0004"),
    ("IBAN", "pay DE89 3704 0044 0532 0130 00 please", "DE89 3704 0044 0532 0130 00"),
    ("IBAN", "pay GB82WEST12345698765432.", "GB82WEST12345698765432"),
    ("SSN", "ssn 123-45-6789.", "123-45-6789"),
]

KEPT = [
    "2026-11-26T05:03:01Z",  # dates and times
    "order 4111111111111112",  # fails Luhn
    "ts 1732600000000 ms",  # a timestamp is not a card
    "DE89370400440532013001",  # fails mod 97
    "000-12-3456 and 666-12-3456",  # never-issued SSN areas
    "version 1.2.3-4, port 8080, +5 points",
    "user@localhost",  # no top-level domain
    "Europe/Berlin",
]


@pytest.mark.parametrize(("kind", "text", "value"), FOUND)
def test_each_kind_becomes_a_token_and_comes_back(kind: str, text: str, value: str) -> None:
    vault = PiiVault("tokenize")
    scrubbed = vault.scrub(text)
    assert value not in scrubbed
    assert f"<{kind}_1>" in scrubbed
    assert vault.restore(scrubbed) == text


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert PiiVault("tokenize").scrub(text) == text


def test_tokens_are_stable_per_vault_and_numbered_per_kind() -> None:
    vault = PiiVault("tokenize")
    first = vault.scrub({"to": "a@example.com", "cc": ["b@example.com", "A@Example.com"], "tel": "+1 555 123 4567"})
    assert first == {"to": "<EMAIL_1>", "cc": ["<EMAIL_2>", "<EMAIL_1>"], "tel": "<PHONE_1>"}
    assert vault.scrub("again a@example.com") == "again <EMAIL_1>"  # a later result of the same run
    assert PiiVault("tokenize").scrub("b@example.com") == "<EMAIL_1>"  # another run: its own numbering


def test_keys_and_nested_values_are_scrubbed_and_restored() -> None:
    vault = PiiVault("tokenize")
    data = {"a@example.com": {"list": [[{"ssn": "123-45-6789"}]]}, "n": 3, "ok": True, "none": None}
    scrubbed = vault.scrub(data)
    assert scrubbed == {"<EMAIL_1>": {"list": [[{"ssn": "<SSN_1>"}]]}, "n": 3, "ok": True, "none": None}
    assert vault.restore(scrubbed) == data
    assert data["a@example.com"]["list"][0][0]["ssn"] == "123-45-6789"  # the input is not changed in place


def test_restore_leaves_unknown_tokens_and_other_vaults_tokens() -> None:
    vault = PiiVault("tokenize")
    vault.scrub("a@example.com")
    assert vault.restore("<EMAIL_1> <EMAIL_2> <PHONE_1> <NOT_1>") == "a@example.com <EMAIL_2> <PHONE_1> <NOT_1>"


def test_redact_has_no_way_back() -> None:
    vault = PiiVault("redact")
    assert vault.scrub("mail a@example.com or call (555) 123-4567") == "mail <EMAIL> or call <PHONE>"
    assert vault.restore("<EMAIL_1>") == "<EMAIL_1>"
    assert vault.replaced == 2


def test_off_changes_nothing() -> None:
    vault = PiiVault("off")
    assert vault.scrub("a@example.com") == "a@example.com"
    assert not vault.active


def test_bad_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="tokenize"):
        PiiVault("hide")  # type: ignore[arg-type]


def test_deep_data_does_not_recurse() -> None:
    deep: object = "a@example.com"
    for _ in range(50_000):
        deep = [deep]
    scrubbed = PiiVault("tokenize").scrub(deep)
    for _ in range(50_000):
        assert isinstance(scrubbed, list)
        scrubbed = scrubbed[0]
    assert scrubbed == "<EMAIL_1>"


def test_hostile_text_is_scrubbed_in_linear_time() -> None:
    # Patterns built to make a backtracking regex explode; 8 MiB is the biggest tool result.
    hostile = ("+" + "1" * 30 + " ") * 50_000 + ("a" * 60 + "@") * 50_000 + ("4 " * 20 + "x") * 50_000
    start = time.process_time()
    PiiVault("tokenize").scrub(hostile)
    assert time.process_time() - start < 20  # generous: a quadratic pattern takes minutes


def test_checksums() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("GB82 WEST 1234 5698 7654 32") and not iban_valid("GB83WEST12345698765432")
