"""Replaces credentials with ``[REDACTED]`` in everything a run returns.

Two sources: common key formats (below) and exact secret values registered with
`Redactor.add_secret` (the broker adds every configured server's env and header
values).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

MARKER = "[REDACTED]"

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
