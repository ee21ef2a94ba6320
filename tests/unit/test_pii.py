"""PII detection, stable tokens, restoring tokens in tool arguments, and redaction without a way back."""

from __future__ import annotations

import time

import pytest

from wasmexec._runctx.toolhost import HostCallError
from wasmexec._tools.pii import MAX_TOKENS_PER_CALL, PiiVault, iban_valid, luhn_valid

TAG = "tag234"


def _vault(mode: str = "tokenize") -> PiiVault:
    return PiiVault(mode, tag=TAG)  # type: ignore[arg-type]


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
    vault = _vault()
    scrubbed = vault.scrub(text)
    assert value not in scrubbed
    assert f"<{kind}_1_{TAG}>" in scrubbed
    restored, given = vault.restore(scrubbed)
    assert restored == text and given.values == {f"<{kind}_1_{TAG}>": value}


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert PiiVault("tokenize").scrub(text) == text


def test_tokens_are_stable_per_vault_and_numbered_per_kind() -> None:
    vault = _vault()
    first = vault.scrub({"to": "a@example.com", "cc": ["b@example.com", "A@Example.com"], "tel": "+1 555 123 4567"})
    assert first == {
        "to": f"<EMAIL_1_{TAG}>",
        "cc": [f"<EMAIL_2_{TAG}>", f"<EMAIL_1_{TAG}>"],
        "tel": f"<PHONE_1_{TAG}>",
    }
    assert vault.scrub("again a@example.com") == f"again <EMAIL_1_{TAG}>"  # a later result of the same run
    other = PiiVault("tokenize")
    assert other.scrub("b@example.com") == f"<EMAIL_1_{other.tag}>" and other.tag != TAG  # its own numbering and tag


def test_keys_and_nested_values_are_scrubbed_and_restored() -> None:
    vault = _vault()
    data = {"a@example.com": {"list": [[{"ssn": "123-45-6789"}]]}, "n": 3, "ok": True, "none": None}
    scrubbed = vault.scrub(data)
    assert scrubbed == {f"<EMAIL_1_{TAG}>": {"list": [[{"ssn": f"<SSN_1_{TAG}>"}]]}, "n": 3, "ok": True, "none": None}
    assert vault.restore(scrubbed)[0] == data
    assert data["a@example.com"]["list"][0][0]["ssn"] == "123-45-6789"  # the input is not changed in place


def test_restore_refuses_a_token_it_never_issued_naming_it() -> None:
    vault = _vault()
    vault.scrub("a@example.com")
    with pytest.raises(HostCallError, match=f"<EMAIL_2_{TAG}> was never issued") as caught:
        vault.restore({"to": f"<EMAIL_1_{TAG}> <EMAIL_2_{TAG}>"})
    assert caught.value.kind == "invalid-argument"
    with pytest.raises(HostCallError, match="<EMAIL_1_other2> belongs to another run or session"):
        vault.restore(["<EMAIL_1_other2>"])


def test_restore_passes_text_that_is_no_token_as_it_is() -> None:
    vault = _vault()
    vault.scrub("a@example.com")
    text = f"<EMAIL_1> <EMAIL> <NOT_1_{TAG}> <EMAIL_1_{TAG.upper()}> <EMAIL_1_{TAG}"
    restored, given = vault.restore(text)
    assert restored == text and not given


def test_a_call_may_carry_a_bounded_number_of_tokens() -> None:
    vault = _vault()
    tokens = vault.scrub([f"u{index}@example.com" for index in range(MAX_TOKENS_PER_CALL + 1)])
    assert len(vault.restore(tokens[:-1])[1].values) == MAX_TOKENS_PER_CALL
    with pytest.raises(HostCallError, match="PII tokens") as caught:
        vault.restore(tokens)
    assert caught.value.kind == "limit-exceeded"


def _given(*values: str) -> tuple[PiiVault, list[str], object]:
    vault = _vault()
    tokens = [vault.scrub(value) for value in values]
    return vault, tokens, vault.restore(tokens)[1]


GLUED = [
    ("suffix", "{v}_", "{t}_"),
    ("prefix", "x" * 70 + "{v}", "x" * 70 + "{t}"),
    ("both", "abc{v}def", "abc{t}def"),
    ("upper case", "{V}!", "{t}!"),
    ("URL-encoded", "mailto:alice.smith%40example.com", "mailto:{t}"),
    ("JSON-escaped", "\\u0061lice.smith\\u0040example.com", "{t}"),
    ("inside JSON text", '{{"to": "{v}x"}}', '{{"to": "{t}x"}}'),
]


@pytest.mark.parametrize(("form", "returned", "expected"), GLUED, ids=[case[0] for case in GLUED])
def test_a_given_value_is_hidden_exactly_wherever_it_is_glued(form: str, returned: str, expected: str) -> None:
    value = "alice.smith@example.com"
    vault, [token], given = _given(value)
    text = returned.format(v=value, V=value.upper())
    assert vault.scrub({"k": [text], text: 1}, given) == {"k": [expected.format(t=token)], expected.format(t=token): 1}


def test_digits_are_hidden_with_any_separators_and_glued_to_other_digits() -> None:
    vault, [card, phone], given = _given("4111 1111 1111 1111", "+44 20 7946 0958")
    shown = vault.scrub(
        ["x4111111111111111y", "ref:4111-1111-1111-1111:", "9+442079460958", "(44) 20-7946/0958"], given
    )
    assert shown == [f"x{card}y", f"ref:{card}:", f"9+{phone}", f"({phone}"]


def test_escaped_digits_are_hidden_and_the_rest_of_the_text_kept() -> None:
    vault, [ssn], given = _given("123-45-6789")
    assert vault.scrub("a%2B\\u0031\\u0032%33-45-6789%20b", given) == f"a%2B{ssn}%20b"


def test_a_value_in_pieces_across_consecutive_strings_becomes_one_token() -> None:
    vault, [token], given = _given("alice.smith@example.com")
    pieces = {"id": 7, "parts": ["Hi alice.", "smith@exa", "mple.com", " bye"], "next": "other"}
    assert vault.scrub(pieces, given) == {"id": 7, "parts": [f"Hi {token}", "", "", " bye"], "next": "other"}


def test_a_cut_never_leaves_part_of_a_given_value() -> None:
    _, [token], given = _given("alice.smith@example.com")
    assert given.shown("-" * 90 + "alice.smith@example.com", 100) == ("-" * 90 + token)[:100]  # type: ignore[attr-defined]


def test_many_given_values_over_a_big_result_are_hidden_in_reasonable_time() -> None:
    half = MAX_TOKENS_PER_CALL // 2
    numbers = [f"+44 20 7946 {index:04d}" for index in range(half)]
    vault, tokens, given = _given(*[f"user{index}@example.com" for index in range(half)], *numbers)
    # 8 MiB (the biggest tool result) that starts every value many times over, with escapes to decode.
    text = ("user1%40example.org +44 20 7946 x " * 240_000) + "user49%40example.com"
    start = time.process_time()
    assert vault.scrub(text, given).endswith(tokens[half - 1])  # type: ignore[union-attr]
    assert time.process_time() - start < 20  # measured: about 3 s


def test_redact_has_no_way_back() -> None:
    vault = PiiVault("redact")
    assert vault.scrub("mail a@example.com or call (555) 123-4567") == "mail <EMAIL> or call <PHONE>"
    assert vault.restore(f"<EMAIL_1_{vault.tag}>")[0] == f"<EMAIL_1_{vault.tag}>"
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
    scrubbed = _vault().scrub(deep)
    for _ in range(50_000):
        assert isinstance(scrubbed, list)
        scrubbed = scrubbed[0]
    assert scrubbed == f"<EMAIL_1_{TAG}>"


def test_hostile_text_is_scrubbed_in_linear_time() -> None:
    # Patterns built to make a backtracking regex explode; 8 MiB is the biggest tool result.
    hostile = ("+" + "1" * 30 + " ") * 50_000 + ("a" * 60 + "@") * 50_000 + ("4 " * 20 + "x") * 50_000
    start = time.process_time()
    PiiVault("tokenize").scrub(hostile)
    assert time.process_time() - start < 20  # generous: a quadratic pattern takes minutes


def test_checksums() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("GB82 WEST 1234 5698 7654 32") and not iban_valid("GB83WEST12345698765432")
