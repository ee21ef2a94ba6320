"""PII in tool results: stable tokens the model sees, real values only on the host.

With ``tokenize``, every e-mail address, phone number, payment card number (Luhn-checked),
IBAN (mod-97-checked) and US social security number in a tool result becomes a token such as
``<EMAIL_1>`` before the sandboxed code sees it, so nothing the run returns to the model can
hold the value. The same value always gets the same token within one vault (one run, or
one session), and tokens the code passes back into tool arguments are replaced by their
values on the host, so an agent can act on data it never saw. With ``redact`` values become
``<EMAIL>`` and there is no way back. A run's vault lives in memory only; a session's is kept
sealed with the session between its runs (`to_bytes`, `from_bytes`; `wasmexec._state.sessions`).

Tokens name their vault (``<EMAIL_1_k7q2mx>``: kind, number, the vault's random tag), so a
token is never resolved by a vault that did not issue it: restoring one this vault does not
know (another run's, an ended session's, or made up) fails the call, naming the token, and
a number is never issued twice within a vault. A session's vault lives with its session.

Exact values: `restore` reports the values it put into a call (`Given`), and everything that
call returns is scrubbed of them before the pattern pass, so text glued to a value (which
defeats the patterns' boundaries) cannot hide it. What counts as the value is in `Given`:
any case, URL and JSON escapes, separators in numbers, one string or consecutive strings
(pieces in document order). Not recognised: other encodings (base64, HTML entities),
reordered pieces, numbers as JSON numbers, anything a tool derives from its input; the
pattern pass still sees whatever looks like PII. Texts cut to a size for showing (schema
errors, error messages) are scrubbed before the cut (`Given.shown`).

Detection is conservative (it favours missing an odd format over mangling ordinary
numbers): phone numbers need a leading ``+`` and 8-15 digits, or the North American
``(555) 123-4567`` / ``555-123-4567`` shapes.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

from wasmexec._redact import PII_MODES, PiiMode
from wasmexec._runctx.toolhost import HostCallError

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
#: A token names its vault: `TAG_CHARS` random characters of `_TAG_ALPHABET` (no 0/o, 1/l), 2**30 tags,
#: so a token from an ended vault matches a later vault's tag about once in a billion.
TAG_CHARS = 6
_TAG_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
_TOKEN = re.compile(r"<(EMAIL|PHONE|CARD|IBAN|SSN)_(\d{1,9})_([a-z2-9]{6})>")
#: Distinct tokens one call's arguments may hold: each is searched for in everything the call returns.
MAX_TOKENS_PER_CALL = 100
#: The longest text a value can take in any form `Given` finds (a 600-character e-mail address, every
#: character a 6-character escape): text cut for showing is searched this much past the cut.
MAX_FORM_CHARS = 4096


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

    def __init__(self, mode: PiiMode, *, tag: str | None = None) -> None:
        """`tag` names the vault in its tokens (a fresh random one by default; tests pass their own)."""
        if mode not in PII_MODES:
            raise ValueError(f"PII mode must be one of {', '.join(PII_MODES)}, not {mode!r}")
        self.mode = mode
        self.tag = tag if tag is not None else "".join(secrets.choice(_TAG_ALPHABET) for _ in range(TAG_CHARS))
        self._lock = threading.Lock()
        self._tokens: dict[tuple[str, str], str] = {}
        self._values: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self.replaced = 0
        """How many values were replaced so far (for the audit: counts only, never values)."""

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def to_bytes(self) -> bytes:
        """The vault's tokens and values, to keep (sealed) between the runs of a session."""
        with self._lock:
            entries = [
                [kind, canonical, token, self._values[token]] for (kind, canonical), token in self._tokens.items()
            ]
            state = {"v": 1, "mode": self.mode, "tag": self.tag, "entries": entries, "counts": self._counts,
                     "replaced": self.replaced}  # fmt: skip
        return json.dumps(state, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, mode: PiiMode) -> PiiVault:
        """The vault `to_bytes` kept; a fresh one when it was kept under another mode.

        Raises:
            ValueError: `data` is not what `to_bytes` writes.
        """
        try:
            state = json.loads(data)
            if state["v"] != 1 or state["mode"] != mode:
                return cls(mode)
            vault = cls(mode, tag=str(state["tag"]))
            for kind, canonical, token, value in state["entries"]:
                vault._tokens[(str(kind), str(canonical))] = str(token)
                vault._values[str(token)] = str(value)
            vault._counts = {str(kind): int(count) for kind, count in state["counts"].items()}
            vault.replaced = int(state["replaced"])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a kept PII vault: {exc}") from None
        return vault

    def scrub(self, value: Any, given: Given | None = None) -> Any:
        """`value` (JSON data) with every PII value in its strings, keys included, replaced.

        `given` (what `restore` put into the call that returned `value`) is taken out first, in
        every form `Given.hide` knows; then the patterns find the rest."""
        if not self.active:
            return value
        if given is not None and given:
            value = given.hide(value)
        return _map_strings(value, self._scrub_text)

    def restore(self, value: Any) -> tuple[Any, Given]:
        """`value` (tool arguments) with this vault's tokens replaced by their real values, and those values.

        Raises:
            HostCallError: ``invalid-argument`` for a token this vault never issued (another run's or
                session's, an ended session's, or made up): it is refused, never passed on as text.
        """
        if self.mode != "tokenize":
            return value, Given({})
        used: dict[str, str] = {}
        restored = _map_strings(value, functools.partial(self._restore_text, used))
        return restored, Given(used)

    def export(self) -> dict[str, Any]:
        """Its tokens and values, for a paused run's sealed state (`wasmexec._runctx.journal`): the replay must
        resolve the tokens the first run handed out. Never written anywhere unsealed."""
        with self._lock:
            return {"mode": self.mode, "tag": self.tag, "values": dict(self._values), "counts": dict(self._counts)}

    @classmethod
    def imported(cls, data: Any, mode: PiiMode) -> PiiVault:
        """A vault with the tag and tokens of an `export` (a fresh one if `data` is not an export)."""
        tag = data.get("tag") if isinstance(data, dict) else None
        vault = cls(mode, tag=tag if isinstance(tag, str) and re.fullmatch(r"[a-z2-9]{6}", tag) else None)
        vault.merge(data)
        return vault

    def merge(self, data: Any) -> None:
        """Adds the tokens of an `export` of a vault with this tag that this one lacks (others are ignored)."""
        if not isinstance(data, dict) or data.get("tag") != self.tag or not isinstance(data.get("values"), dict):
            return
        with self._lock:
            for token, value in data["values"].items():
                match = _TOKEN.fullmatch(token) if isinstance(token, str) and isinstance(value, str) else None
                if match is None or token in self._values or len(self._values) >= MAX_VAULT_VALUES:
                    continue
                kind, number = match.group(1), int(match.group(2))
                self._values[token] = value
                self._tokens.setdefault((kind, _canonical(kind, value)), token)
                self._counts[kind] = max(self._counts.get(kind, 0), number)

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
                token = f"<{kind}_{self._counts[kind]}_{self.tag}>"
                self._tokens[key] = token
                self._values[token] = found
            return token

    def _restore_text(self, used: dict[str, str], text: str) -> str:
        if "<" not in text:
            return text
        return _TOKEN.sub(functools.partial(self._value_of, used), text)

    def _value_of(self, used: dict[str, str], match: re.Match[str]) -> str:
        token = match.group()
        with self._lock:
            value = self._values.get(token)
        if value is None:
            raise HostCallError("invalid-argument", _unknown_token(token, match.group(3) == self.tag),
                                "Get the value again in this run (or session) and pass the token it comes "
                                "back as; tokens hold only where they were given.")  # fmt: skip
        if token not in used and len(used) >= MAX_TOKENS_PER_CALL:
            raise HostCallError("limit-exceeded", f"the arguments hold more than {MAX_TOKENS_PER_CALL} distinct "
                                "PII tokens", "Pass fewer values per call.", limit="payload_bytes")  # fmt: skip
        used[token] = value
        return value


def _unknown_token(token: str, own_tag: bool) -> str:
    if own_tag:
        return f"the PII token {token} was never issued in this run or session, so it stands for nothing"
    return (
        f"the PII token {token} belongs to another run or session, or to a session that has ended (its "
        "tokens end with it), so it stands for nothing here and was not passed on"
    )


class Given:
    """The real values one call's arguments got in place of tokens: what that call returns is scrubbed of them.

    `hide` finds each value exactly (not by pattern, so text glued to it cannot hide it) in
    every string of the answer, keys included: in any letter case; with any of its characters
    written as a URL escape (``%40``) or a JSON escape (``\\u0040``); for phone, card, IBAN and
    social security numbers also with up to three of ``space ( ) . - /`` between its digits. A
    value cut across consecutive strings (a tool that returns its input in pieces) is found too,
    in document order, and becomes its token in the first piece (the others lose their part).
    The work is a few linear scans per value (`MAX_TOKENS_PER_CALL` values at most).
    """

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        """token → the real value put in its place."""
        self._emails = [(value.translate(_FOLD), token) for token, value in values.items() if "@" in value]
        self._numbers = [
            (re.compile(_digits_form(value)), token) for token, value in values.items() if "@" not in value
        ]

    def __bool__(self) -> bool:
        return bool(self.values)

    def shown(self, text: str, limit: int) -> str:
        """`text` cut to `limit` characters without leaving part of a given value at the cut."""
        return self.hide(text[: limit + MAX_FORM_CHARS])[:limit] if self.values else text[:limit]

    def hide(self, value: Any) -> Any:
        """`value` (JSON data) with every given value, in every form above, replaced by its token."""
        if not self.values:
            return value
        value = _map_strings(value, self._hide_text)
        return self._hide_pieces(value)

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        """Where the given values are in `text`: (start, end, token), sorted, not overlapping."""
        view = _View(text)
        found = []
        for folded, token in self._emails:
            start = view.text.find(folded)
            while start >= 0:
                found.append((start, start + len(folded), token))
                start = view.text.find(folded, start + 1)
        for pattern, token in self._numbers:
            found.extend((match.start(), match.end(), token) for match in pattern.finditer(view.text))
        spans: list[tuple[int, int, str]] = []
        for start, end, token in sorted(found, key=lambda span: (span[0], -span[1])):
            if spans and start < spans[-1][1]:  # inside or across one already taken: extend it
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]), spans[-1][2])
            else:
                spans.append((start, end, token))
        return [(view.origin(start), view.origin_end(end), token) for start, end, token in spans]

    def _hide_text(self, text: str) -> str:
        spans = self._spans(text)
        return _cut(text, [text], spans)[0] if spans else text

    def _hide_pieces(self, value: Any) -> Any:
        """A value whose pieces lie in consecutive strings (values, not keys) becomes its token in the first."""
        pieces: list[str] = []

        def collect(text: str) -> str:
            pieces.append(text)
            return text

        _map_strings(value, collect, keys=False)
        if len(pieces) < 2:
            return value
        joined = "".join(pieces)
        spans = self._spans(joined)
        if not spans:
            return value
        changed = iter(_cut(joined, pieces, spans))
        return _map_strings(value, lambda _: next(changed), keys=False)


#: ASCII letters to lower case, nothing else: the text keeps its length (`str.lower` may not).
_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ESCAPE = re.compile(r"%([0-9a-f]{2})|\\u([0-9a-f]{4})")


class _View:
    """A text case-folded with its URL and JSON escapes decoded, and the way back to the text's positions."""

    def __init__(self, text: str) -> None:
        folded = text.translate(_FOLD)
        self.escapes: list[int] = []
        """Where each escape is in `self.text` (one character there)."""
        self._sources: list[int] = []
        self._lengths: list[int] = []
        if "%" not in folded and "\\u" not in folded:
            self.text = folded
            return
        parts = []
        done = length = 0  # in the folded text, and in the view
        for match in _ESCAPE.finditer(folded):
            parts.append(folded[done : match.start()])
            length += match.start() - done
            self.escapes.append(length)
            self._sources.append(match.start())
            self._lengths.append(match.end() - match.start())
            parts.append(chr(int(match.group(1) or match.group(2), 16)).translate(_FOLD))
            length += 1
            done = match.end()
        parts.append(folded[done:])
        self.text = "".join(parts)

    def origin(self, position: int) -> int:
        """The text's position of the view's character at `position`."""
        index = bisect.bisect_right(self.escapes, position) - 1
        if index < 0:
            return position
        if self.escapes[index] == position:
            return self._sources[index]
        return self._sources[index] + self._lengths[index] + (position - self.escapes[index] - 1)

    def origin_end(self, end: int) -> int:
        """The text's position just after the view's character at `end - 1`."""
        index = bisect.bisect_right(self.escapes, end - 1) - 1
        if index >= 0 and self.escapes[index] == end - 1:
            return self._sources[index] + self._lengths[index]
        return self.origin(end - 1) + 1


def _cut(joined: str, pieces: list[str], spans: list[tuple[int, int, str]]) -> list[str]:
    """The pieces of `joined` with each span replaced: its token where it starts, nothing elsewhere."""
    result = []
    low = 0
    for piece in pieces:
        high = low + len(piece)
        parts = []
        position = low
        for start, end, token in spans:
            if end <= low or start >= high:
                continue
            parts.append(joined[position : max(position, start)])
            if start >= low:
                parts.append(token)
            position = max(position, min(end, high))
        parts.append(joined[position:high])
        result.append("".join(parts))
        low = high
    return result


def _digits_form(value: str) -> str:
    """A regex (on a `_View`) for a number: its letters and digits with up to 3 separators between them.

    It starts with a literal character, which `re` searches for quickly (measured: 50 phone numbers
    over 8 MiB that starts each of them 240,000 times take about 2 s, the worst case)."""
    significant = [re.escape(char.translate(_FOLD)) for char in value if char.isalnum()]
    return r"[ ().\-/]{0,3}".join(significant)  # a leading "+" stays: it carries nothing


def _canonical(kind: str, text: str) -> str:
    """The same value written two ways gets one token (case of e-mail, spaces in card numbers)."""
    if kind == "EMAIL":
        return text.lower()
    return re.sub(r"[\s().-]", "", text)


def _map_strings(value: Any, change: Callable[[str], str], *, keys: bool = True) -> Any:
    """`value` with `change` applied to every string (dict keys too, if `keys`), values in document order.

    Iterative: data may be deep."""
    if isinstance(value, str):
        return change(value)
    if not isinstance(value, (dict, list)):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    children: list[tuple[Any, Any, Any]] = []
    while stack:
        item, parent, slot = stack.pop()
        if isinstance(item, str):
            parent[slot] = change(item)
        elif isinstance(item, dict):
            copy: dict[Any, Any] = {}
            parent[slot] = copy
            for key, child in item.items():
                new_key = change(key) if keys and isinstance(key, str) else key
                copy[new_key] = None
                children.append((child, copy, new_key))
            stack.extend(reversed(children))  # popped in document order
            children.clear()
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            stack.extend((item[index], items, index) for index in range(len(item) - 1, -1, -1))
        else:
            parent[slot] = item
    return root[0]
