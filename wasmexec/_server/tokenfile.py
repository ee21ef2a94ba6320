"""Bearer tokens from a file (``serve --http --auth-token-file FILE``), for small deployments.

One line per token, ``PRINCIPAL TOKEN``; blank lines and lines starting with ``#`` are
ignored. The principal is a name the operator chooses (it is written as is in the audit
log); a principal may have several tokens (to rotate one without downtime). The file
must be private (``chmod 600``), its tokens at least `MIN_TOKEN_CHARS` characters of
the RFC 6750 token alphabet and each used once; anything else refuses the start, naming
the line (never the token).

A presented token is compared with every known one in constant time: their SHA-256
digests are compared with `hmac.compare_digest`, all of them, so neither the time taken
nor an early exit says how much of a guess was right, or how long the real tokens are.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken

from wasmexec._exceptions import ConfigError
from wasmexec._secretfile import read_secret_file

#: 128 bits as hex (`openssl rand -hex 16`); shorter ones can be guessed by a patient client.
MIN_TOKEN_CHARS = 32
#: Longer is a misnamed file, not a token list.
MAX_TOKEN_FILE_BYTES = 1024 * 1024
#: RFC 6750 ``b64token``: what a client can send after ``Bearer``.
TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
#: Printable, no spaces, bounded: the name goes into audit lines as is.
PRINCIPAL = re.compile(r"[A-Za-z0-9._@:+-]{1,128}")
_WHAT = "auth token file"


@dataclass(frozen=True)
class _Entry:
    principal: str
    digest: bytes


class TokenFileVerifier:
    """The SDK's `TokenVerifier` for the tokens of a file: the principal of a token, or None."""

    def __init__(self, entries: list[tuple[str, str]]) -> None:
        """Args:
        entries: (principal, token) pairs, as `load` checked them.
        """
        self._entries = [_Entry(principal, _digest(token)) for principal, token in entries]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TokenFileVerifier:
        """The tokens in `path` (see the module).

        Raises:
            ConfigError: the file is not private, or a line is malformed, repeats a token or has a short one.
        """
        data = read_secret_file(path, _WHAT, MAX_TOKEN_FILE_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{_WHAT} {path} is not UTF-8 text") from None
        entries: list[tuple[str, str]] = []
        seen: dict[bytes, int] = {}
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            where = f"{_WHAT} {path}, line {number}"
            if len(fields) != 2:
                raise ConfigError(f"{where}: expected `PRINCIPAL TOKEN` (two fields), found {len(fields)}")
            principal, token = fields
            if not PRINCIPAL.fullmatch(principal):
                raise ConfigError(f"{where}: the principal must be 1 to 128 of A-Z a-z 0-9 . _ @ : + -")
            if not TOKEN.fullmatch(token):
                raise ConfigError(f"{where}: the token has characters a bearer token cannot carry "
                                  "(use e.g. `openssl rand -hex 32`)")  # fmt: skip
            if len(token) < MIN_TOKEN_CHARS:
                raise ConfigError(f"{where}: the token is shorter than {MIN_TOKEN_CHARS} characters "
                                  "(use e.g. `openssl rand -hex 32`)")  # fmt: skip
            digest = _digest(token)
            if digest in seen:
                raise ConfigError(f"{where}: the same token as line {seen[digest]}: each token must name one principal")
            seen[digest] = number
            entries.append((principal, token))
        if not entries:
            raise ConfigError(f"{_WHAT} {path} has no tokens")
        return cls(entries)

    @property
    def principals(self) -> list[str]:
        """The principals named, each once, in file order."""
        return list(dict.fromkeys(entry.principal for entry in self._entries))

    def principal_of(self, token: str) -> str | None:
        """The principal whose token this is, or None; the same work whatever the token."""
        presented = _digest(token)
        found: str | None = None
        for entry in self._entries:  # no early exit: every entry is compared
            if hmac.compare_digest(presented, entry.digest):
                found = entry.principal
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = self.principal_of(token)
        if principal is None:
            return None
        # No issuer: a token-file principal is never the same as any JWT subject (those have one).
        return AccessToken(token=token, client_id=principal, scopes=[], subject=principal)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
