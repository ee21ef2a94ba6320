"""JSON with comments and trailing commas (JSONC), as VS Code, Cursor and Windsurf let users write their configs.

One linear pass (a project's config may be hostile: no regular expression that can backtrack).
"""

from __future__ import annotations

import json
from typing import Any


def loads_jsonc(text: str) -> Any:
    """Parses JSON that may hold ``//`` and ``/* */`` comments and trailing commas; ValueError like `json.loads`."""
    try:
        return json.loads(text)
    except ValueError:
        pass  # the plain parser first: most files are plain JSON, and its errors point at the right place
    return json.loads(_strip(text))


def _strip(text: str) -> str:
    """`text` without comments and without commas that only precede a closing bracket (strings untouched)."""
    out: list[str] = []
    comma = -1  # index in `out` of a comma that may turn out to be trailing
    i, size = 0, len(text)
    while i < size:
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < size and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            comma, i = -1, end + 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = size if newline < 0 else newline
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = size if close < 0 else close + 2
        elif ch in "}]" and comma >= 0:
            out[comma] = ""  # a trailing comma
            out.append(ch)
            comma, i = -1, i + 1
        else:
            if ch == ",":
                comma = len(out)
            elif not ch.isspace():
                comma = -1
            out.append(ch)
            i += 1
    return "".join(out)
