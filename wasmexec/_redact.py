"""Replaces credentials with ``[REDACTED]`` in everything a run returns.

Two sources: common key formats (below) and exact secret values registered with
`Redactor.add_secret` (the broker adds the configured servers' env and header values
that `is_secret` calls secrets).
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections import Counter
from collections.abc import Collection, Iterable
from typing import Any, Literal

MARKER = "[REDACTED]"

#: What becomes of PII in tool results (`wasmexec._tools.pii`): named here, with the other redaction,
#: so that the CLI offers the modes without loading the tools package on every start.
PiiMode = Literal["off", "tokenize", "redact"]
PII_MODES: tuple[PiiMode, ...] = ("off", "tokenize", "redact")

#: Secret values shorter than this are not redacted: they would match ordinary text.
MIN_SECRET_LENGTH = 6

_KEY_FORMATS = [
    r"sk-(?:proj-|ant-(?:api|admin)\d\d-)?[A-Za-z0-9_\-]{20,}",  # OpenAI, Anthropic
    r"gh[pousr]_[A-Za-z0-9]{36,255}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,255}",
    r"glpat-[A-Za-z0-9_\-]{20,}",  # GitLab
    r"xox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",  # AWS access key id
    r"AIza[0-9A-Za-z_\-]{35}",  # Google API key
    r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{20,}",  # Stripe
    r"npm_[A-Za-z0-9]{36}",
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JWT
    r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z]+ )?PRIVATE KEY-----",
    r"(?<=[Bb]earer )[A-Za-z0-9_\-.=~+/]{16,}",
]
_KEY_PATTERN = re.compile("|".join(f"(?:{p})" for p in _KEY_FORMATS))

#: Words of an env or header name that say its value is a credential (matched whole, any case).
SECRET_NAME_WORDS = frozenset({
    "token", "tokens", "secret", "secrets", "key", "keys", "apikey", "password", "passwd", "passphrase", "pass",
    "pw", "auth", "oauth", "authorization", "credential", "credentials", "cookie", "cookies", "private", "session",
    "signature", "sig", "jwt", "bearer", "dsn",
})  # fmt: skip
#: Endings that make one run-together word a secret name too (PGPASSWORD, ACCESSTOKEN, OPENAI_APIKEY).
SECRET_NAME_ENDINGS = ("token", "secret", "password", "passwd", "apikey", "credentials")
#: A value this long or longer, without spaces, is a candidate for the entropy test; shorter ones rarely are keys.
HIGH_ENTROPY_MIN_LENGTH = 20
#: Shannon entropy (bits per character) from which such a value counts as random: random base64 of 20+
#: characters is at 4 or more, while paths, URLs, locales and words stay near or below 3.5.
HIGH_ENTROPY_BITS_PER_CHAR = 3.5
#: Random keys switch between lower case, upper case and digits at about 60% of neighbouring letters and
#: digits; words, CamelCase names, paths and hosts switch far less often.
HIGH_ENTROPY_MIN_SWITCHES = 0.4

_NAME_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")


def is_secret(name: str, value: str, *, marked: Collection[str] = ()) -> bool:
    """Whether a configured env or header value is a credential, to be redacted from results.

    The rule, in order: a name the config lists in ``"secrets"`` (any case); a name with a word such as
    TOKEN, SECRET, KEY, PASSWORD, AUTH, CREDENTIAL, COOKIE, PRIVATE or SESSION in it (``GITHUB_TOKEN``,
    ``X-Api-Key``, ``apiKey``, ``PGPASSWORD``; so ``Authorization``, ``Proxy-Authorization`` and
    ``Cookie`` headers always are); a value in a known key format (see ``_KEY_FORMATS``); or a value that
    looks random: at least `HIGH_ENTROPY_MIN_LENGTH` characters without spaces, at least
    `HIGH_ENTROPY_BITS_PER_CHAR` bits of entropy per character, and neighbouring letters and digits that
    switch between lower case, upper case and digits at least `HIGH_ENTROPY_MIN_SWITCHES` of the time
    (a heuristic: a name or the ``"secrets"`` list is the sure way). Anything else (``TZ=Europe/Berlin``,
    ``LANG=en_US.UTF-8``, paths, URLs) is left alone, so it is never replaced in results.

    Args:
        name: The env variable or header name.
        value: Its configured value.
        marked: Names the config marks as secrets.
    """
    folded = name.casefold()
    if any(folded == other.casefold() for other in marked):
        return True
    words = [word.casefold() for word in _NAME_WORDS.findall(name)]
    if any(word in SECRET_NAME_WORDS or word.endswith(SECRET_NAME_ENDINGS) for word in words):
        return True
    return _KEY_PATTERN.search(value) is not None or _looks_random(value)


def _looks_random(value: str) -> bool:
    if len(value) < HIGH_ENTROPY_MIN_LENGTH or any(ch.isspace() for ch in value):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    if entropy < HIGH_ENTROPY_BITS_PER_CHAR:
        return False
    pairs = [(a, b) for run in _ALNUM_RUN.findall(value) for a, b in itertools.pairwise(run)]
    switches = sum(_char_class(a) != _char_class(b) for a, b in pairs)
    return bool(pairs) and switches >= HIGH_ENTROPY_MIN_SWITCHES * len(pairs)


def _char_class(ch: str) -> int:
    return 0 if ch.islower() else 1 if ch.isupper() else 2


class Redactor:
    """Finds and replaces secrets; thread-safe, shared by every run of a host."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._secret_pattern: re.Pattern[str] | None = None
        for secret in secrets:
            self.add_secret(secret)

    def add_secret(self, value: str) -> None:
        """Redacts this exact value from now on (ignored when too short to be a secret)."""
        if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
            return
        with self._lock:
            if value in self._secrets:
                return
            self._secrets.add(value)
            longest_first = sorted(self._secrets, key=len, reverse=True)
            self._secret_pattern = re.compile("|".join(re.escape(s) for s in longest_first))

    def redact_text(self, text: str) -> tuple[str, int]:
        """Returns the text with secrets replaced, and how many were replaced."""
        count = 0
        pattern = self._secret_pattern
        if pattern is not None:
            text, count = pattern.subn(MARKER, text)
        text, found = _KEY_PATTERN.subn(MARKER, text)
        return text, count + found

    def redact(self, value: Any) -> tuple[Any, int]:
        """Redacts every string inside a JSON-like value (dict keys included)."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            total = 0
            cleaned: dict[Any, Any] = {}
            for key, item in value.items():
                new_key, found_in_key = self.redact(key)
                cleaned[new_key], found = self.redact(item)
                total += found + found_in_key
            return cleaned, total
        if isinstance(value, list):
            total = 0
            items = []
            for item in value:
                new_item, found = self.redact(item)
                items.append(new_item)
                total += found
            return items, total
        return value, 0
