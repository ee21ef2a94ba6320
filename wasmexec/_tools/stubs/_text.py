"""Names and text for generated code: identifiers, class names, and server text made safe."""

from __future__ import annotations

import json
import keyword
import re
import unicodedata
from typing import Any, Final

#: Descriptions shown in comments are cut to this many characters.
COMMENT_WIDTH: Final = 100


def class_base(hint: str) -> str:
    """A PascalCase class name for `hint`, before making it unique."""
    base = pascal(hint) or "Model"
    return f"T{base}" if base[0].isdigit() else base


def pascal(text: str) -> str:
    """`text`'s letters and digits in PascalCase (``"max-items"`` → ``"MaxItems"``)."""
    return "".join(word[0].upper() + word[1:] for word in re.findall(r"[A-Za-z0-9]+", text))


def is_python_name(name: str) -> bool:
    """True for names usable as they are: identifiers, not keywords, unchanged by NFKC normalization."""
    return name.isidentifier() and not keyword.iskeyword(name) and unicodedata.normalize("NFKC", name) == name


def one_line(text: Any) -> str:
    """`text` on one line with control characters gone: safe inside a comment or an Args line."""
    if not isinstance(text, str):
        return ""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def shown_name(name: str) -> str:
    """A property name for prose: as it is when it is a Python name, else as a JSON string."""
    return name if is_python_name(name) else json.dumps(name)


def comment_text(text: Any) -> str:
    """`text` on one line, cut to `COMMENT_WIDTH`."""
    line = one_line(text)
    return line if len(line) <= COMMENT_WIDTH else line[: COMMENT_WIDTH - 3].rstrip() + "..."


def docstring_literal(text: str) -> str:
    """A triple-quoted literal whose value is exactly `text`."""
    body = text.replace("\\", "\\\\")
    body = "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii") for c in body)
    body = re.sub(r'"(?="|\Z)', r"\"", body)
    return f'"""{body}"""'


def indent(text: str, prefix: str) -> str:
    """`text` with `prefix` before every non-empty line."""
    return "\n".join(prefix + line if line else line for line in text.split("\n"))
