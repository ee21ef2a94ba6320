"""JSON with comments and trailing commas (JSONC), as VS Code, Cursor and Windsurf let users write their configs."""

from __future__ import annotations

import json
import re
from typing import Any

#: A string, a // or /* */ comment, or a comma before a closing bracket: strings are matched first and kept.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*[\s\S]*?\*/|,(?=\s*(?://[^\n]*\s*|/\*[\s\S]*?\*/\s*)*[}\]])')


def loads_jsonc(text: str) -> Any:
    """Parses JSON that may hold comments and trailing commas; raises ValueError like `json.loads`."""
    try:
        return json.loads(text)
    except ValueError:
        pass  # the plain parser first: most files are plain JSON, and its errors point at the right place
    return json.loads(_TOKENS.sub(lambda found: found.group(0) if found.group(0).startswith('"') else "", text))
