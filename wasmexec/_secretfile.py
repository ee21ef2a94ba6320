"""Reading a file that holds secrets (the state key, bearer tokens): only when no one else can read or change it.

A secret in a file that group or others may read has leaked already, and one they may write
can be swapped for theirs; either way the server refuses to start and says how to fix it
(``chmod 600``), rather than serving with it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from wasmexec._exceptions import ConfigError


def read_secret_file(path: str | os.PathLike[str], what: str, max_bytes: int) -> bytes:
    """The bytes of `path`, a private regular file of at most `max_bytes`.

    Args:
        what: the file's role, for messages (``"state key file"``).

    Raises:
        ConfigError: the file is missing, unreadable, not a regular file, readable or writable by
            group or others, or larger than `max_bytes` (a misnamed file; never read whole).
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())  # the file opened, not whatever the path names a moment later
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"{what} {path} is not a regular file")
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(f"{what} {path} is readable or writable by others "
                                  f"(mode {stat.S_IMODE(info.st_mode):o}); run `chmod 600 {path}`")  # fmt: skip
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {path} is over {max_bytes} bytes: not a key or token file")
    return data
