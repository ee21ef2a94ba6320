"""Types as text: a union of Python type expressions, with why any ``Any`` in it is there."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class PyType:
    """A type expression as a union of members, with why any ``Any`` in it is there."""

    members: tuple[str, ...] = ()
    literals: tuple[str, ...] = ()  # reprs of values, rendered as one Literal[...]
    reasons: tuple[str, ...] = ()
    forward: bool = False  # names a TypedDict that is still being defined

    @property
    def text(self) -> str:
        """The Python expression: ``Literal[...]`` first, ``None`` last, ``Any`` absorbing the rest."""
        if "Any" in self.members:
            return "Any"
        parts = [f"Literal[{', '.join(self.literals)}]"] if self.literals else []
        parts += [m for m in self.members if m not in ("None", "Never")]
        if "None" in self.members:
            parts.append("None")
        return " | ".join(parts) or "Never"


ANY: Final = PyType(("Any",))
NEVER: Final = PyType(("Never",))
NONE: Final = PyType(("None",))


def any_because(reason: str) -> PyType:
    """``Any``, with the reason a stub shows in a comment."""
    return PyType(("Any",), reasons=(reason,))


def unique(items: Iterable[Any]) -> tuple[Any, ...]:
    """`items` without repeats, in first-seen order."""
    return tuple(dict.fromkeys(items))


def union(types: Iterable[PyType]) -> PyType:
    """The union of `types` (members, literals and reasons merged)."""
    items = list(types)
    return PyType(
        members=unique(m for t in items for m in t.members),
        literals=unique(v for t in items for v in t.literals),
        reasons=unique(r for t in items for r in t.reasons),
        forward=any(t.forward for t in items),
    )


def generic(name: str, args: Sequence[PyType]) -> PyType:
    """``name[args...]``, e.g. ``list[str]``."""
    return PyType(
        (f"{name}[{', '.join(a.text for a in args)}]",),
        reasons=unique(r for a in args for r in a.reasons),
        forward=any(a.forward for a in args),
    )


def literal(values: Iterable[Any]) -> PyType:
    """The type of a ``const`` or ``enum``: a ``Literal`` of strings and ints, else their types."""
    parts: list[PyType] = []
    for value in values:
        if value is None:
            parts.append(NONE)
        elif isinstance(value, str | int):  # bool is an int
            parts.append(PyType(literals=(repr(value),)))
        else:
            parts.append(PyType((_value_type(value),)))
    return union(parts) if parts else NEVER


def _value_type(value: Any) -> str:
    if isinstance(value, float):
        return "float"
    if isinstance(value, list):
        return "list[Any]"
    return "dict[str, Any]" if isinstance(value, dict) else "Any"
