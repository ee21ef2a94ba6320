"""PII in tool results: stable tokens the model sees, real values only on the host.

With ``tokenize``, every e-mail address, phone number, payment card number (Luhn-checked),
IBAN (mod-97-checked) and US social security number in a tool result becomes a token such as
``<EMAIL_1>`` before the sandboxed code sees it, so nothing the run returns to the model can
hold the value. The same value always gets the same token within one vault (one run, or
one session), and tokens the code passes back into tool arguments are replaced by their
values on the host, so an agent can act on data it never saw. With ``redact`` values become
``<EMAIL>`` and there is no way back. Vaults live in memory only: never written to disk.

Detection is conservative (it favours missing an odd format over mangling ordinary
numbers): phone numbers need a leading ``+`` and 8-15 digits, or the North American
``(555) 123-4567`` / ``555-123-4567`` shapes.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any, Literal

PiiMode = Literal["off", "tokenize", "redact"]
PII_MODES: tuple[PiiMode, ...] = ("off", "tokenize", "redact")

#: Distinct values one vault keeps: a result with more is still scrubbed, but the excess
#: values share one token per kind and cannot be restored (the vault's memory stays bounded).
MAX_VAULT_VALUES = 100_000

_EMAIL = r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9-]{1,63}\.){1,8}[A-Za-z]{2,24}(?![\w-])"
_CARD = r"(?<![\d-])[2-6](?:[ -]?\d){12,18}(?![\d-])"  # issuers' first digits are 2-6 (not timestamps)
_IBAN = r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![A-Za-z0-9])"
_SSN = r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"
_PHONE = (
    r"(?<![\w+])\+\d[\d ().-]{6,22}\d(?![\d-])"  # international: + and 8-15 digits (checked below)
    r"|(?<![\w(])(?:\(\d{3}\) ?|\d{3}[-. ])\d{3}[-. ]\d{4}(?![\d-])"  # North American
)
#: Order matters: the first alternative that matches at a position wins (an SSN is not a phone).
_KINDS: tuple[tuple[str, str], ...] = (
    ("EMAIL", _EMAIL), ("IBAN", _IBAN), ("CARD", _CARD), ("SSN", _SSN), ("PHONE", _PHONE),
)  # fmt: skip
_TOKEN = re.compile(r"<(EMAIL|PHONE|CARD|IBAN|SSN)_(\d{1,9})>")


@functools.cache
def _pattern() -> re.Pattern[str]:
    """Compiled on first use: the CLI imports this module to build its parser."""
    return re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in _KINDS))


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of payment card numbers."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """ISO 13616: the country code and check digits moved to the end, as a number, mod 97 is 1."""
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in moved)) % 97 == 1


def _genuine(kind: str, text: str) -> bool:
    """The checks a pattern cannot express: checksums and digit counts."""
    if kind == "CARD":
        digits = re.sub(r"\D", "", text)
        return 13 <= len(digits) <= 19 and luhn_valid(digits)
    if kind == "IBAN":
        return iban_valid(text)
    if kind == "PHONE" and text.startswith("+"):
        return 8 <= sum(char.isdigit() for char in text) <= 15
    return True


class PiiVault:
    """One run's (or session's) tokens: scrubs tool results and restores tool arguments. Thread-safe."""

    def __init__(self, mode: PiiMode) -> None:
        if mode not in PII_MODES:
            raise ValueError(f"PII mode must be one of {', '.join(PII_MODES)}, not {mode!r}")
        self.mode = mode
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, str], str] = {}
        self._values: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self.replaced = 0
        """How many values were replaced so far (for the audit: counts only, never values)."""

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def scrub(self, value: Any) -> Any:
        """`value` (JSON data) with every PII value in its strings, keys included, replaced."""
        if not self.active:
            return value
        return _map_strings(value, self._scrub_text)

    def restore(self, value: Any) -> Any:
        """`value` (tool arguments) with this vault's tokens replaced by their real values."""
        if self.mode != "tokenize":
            return value
        return _map_strings(value, self._restore_text)

    def _scrub_text(self, text: str) -> str:
        if not any(char in text for char in "@+-(0123456789") or len(text) < 6:
            return text  # nothing here can match: most strings end at this test
        return _pattern().sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        kind = match.lastgroup or "PII"
        found = match.group()
        if not _genuine(kind, found):
            return found
        with self._lock:
            self.replaced += 1
            if self.mode == "redact":
                return f"<{kind}>"
            key = (kind, _canonical(kind, found))
            token = self._tokens.get(key)
            if token is None:
                if len(self._values) >= MAX_VAULT_VALUES:
                    return f"<{kind}>"
                self._counts[kind] = self._counts.get(kind, 0) + 1
                token = f"<{kind}_{self._counts[kind]}>"
                self._tokens[key] = token
                self._values[token] = found
            return token

    def _restore_text(self, text: str) -> str:
        if "<" not in text:
            return text
        with self._lock:
            return _TOKEN.sub(lambda match: self._values.get(match.group(), match.group()), text)


def _canonical(kind: str, text: str) -> str:
    """The same value written two ways gets one token (case of e-mail, spaces in card numbers)."""
    if kind == "EMAIL":
        return text.lower()
    return re.sub(r"[\s().-]", "", text)


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` with `change` applied to every string, dict keys included. Iterative: data may be deep."""
    if isinstance(value, str):
        return change(value)
    if not isinstance(value, (dict, list)):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, slot = stack.pop()
        if isinstance(item, str):
            parent[slot] = change(item)
        elif isinstance(item, dict):
            copy: dict[Any, Any] = {}
            parent[slot] = copy
            for key, child in item.items():
                new_key = change(key) if isinstance(key, str) else key
                copy[new_key] = None
                stack.append((child, copy, new_key))
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            stack.extend((child, items, index) for index, child in enumerate(item))
        else:
            parent[slot] = item
    return root[0]
