"""TypedDict definitions for one generated module: naming, deduplication, rendering."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from wasmexec._tools.stubs._annotate import schema_type
from wasmexec._tools.stubs._schema import Context, required_keys
from wasmexec._tools.stubs._text import class_base, comment_text, is_python_name
from wasmexec._tools.stubs._types import PyType

#: The `typing` names generated code may use; a stub module imports those it does use.
TYPING_NAMES: Final = ("Any", "Literal", "Never", "NotRequired", "TypedDict")
_RESERVED_NAMES: Final = frozenset({*TYPING_NAMES, "None", "True", "False"})


@dataclass(frozen=True)
class _Field:
    key: str
    annotation: str
    comments: tuple[str, ...]


@dataclass(frozen=True)
class _ClassDef:
    name: str
    doc: str
    fields: tuple[_Field, ...]


class StubWriter:
    """Collects the TypedDict definitions that annotating schemas needs, for one generated module.

    A class is named after its ``$defs``/``definitions`` key when reached through a ``$ref``, else
    after the hint (a property name plus ``Item``/``Value``/``ItemN`` for array items, map values and
    tuple items). Names are unique and never clash with the typing names a stub imports, nor with
    `reserved` (the module's functions). A definition identical to an earlier one from the same
    hint is not repeated. A class used inside its own definition is named there by a string
    (a forward reference), so the rendered text runs without ``from __future__ import annotations``.
    """

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._names: set[str] = {*_RESERVED_NAMES, *reserved}
        self._classes: list[_ClassDef] = []
        self._shapes: dict[tuple[str, str, tuple[_Field, ...]], str] = {}
        self._pending: dict[int, str] = {}  # id of an object schema being defined -> its class name
        self._forward: set[str] = set()  # class names used before their definition was complete
        self._done: dict[tuple[int, int], tuple[Any, Any, str]] = {}  # keeps schema and root alive

    def annotation(self, schema: Any, root: Any = None, name_hint: str = "Model") -> str:
        """The type expression for `schema`, defining the TypedDicts it needs.

        Args:
            schema: The schema to annotate.
            root: The document ``$ref`` pointers are resolved against; `schema` itself when None.
            name_hint: Turned into PascalCase for the class made for `schema` if it is an object.

        Returns:
            The class name for an object with properties, else an expression using such names.
        """
        return self._annotate(schema, root, name_hint).text

    def render(self) -> str:
        """The class definitions so far, each after the ones it uses (empty when there are none)."""
        return "\n\n\n".join(_render_class(c) for c in self._classes)

    def _annotate(self, schema: Any, root: Any, hint: str) -> PyType:
        return schema_type(schema, Context(schema if root is None else root, self), hint)

    def pending_name(self, schema: Any) -> str | None:
        name = self._pending.get(id(schema))
        if name:
            self._forward.add(name)
        return name

    def typed_dict(self, schema: dict[str, Any], props: dict[str, Any], ctx: Context, hint: str) -> PyType:
        key = (id(schema), id(ctx.root))
        if key in self._done:
            return PyType((self._done[key][2],))
        base = class_base(hint)
        name = self._reserve(base)
        self._pending[id(schema)] = name
        required = required_keys(schema)
        try:
            fields = tuple(_field(k, sub, k in required, ctx) for k, sub in props.items())
        finally:
            del self._pending[id(schema)]
        name = self._finish((base, comment_text(schema.get("description")), fields), name)
        self._done[key] = (schema, ctx.root, name)
        return PyType((name,))

    def _reserve(self, base: str) -> str:
        name, count = base, 2
        while name in self._names:
            name, count = f"{base}{count}", count + 1
        self._names.add(name)
        return name

    def _finish(self, shape: tuple[str, str, tuple[_Field, ...]], name: str) -> str:
        """Keeps the new class, or drops it for an earlier one from the same hint with the same body."""
        existing = self._shapes.get(shape)
        if existing is not None and name not in self._forward:
            self._names.discard(name)
            return existing
        self._shapes.setdefault(shape, name)
        self._classes.append(_ClassDef(name, shape[1], shape[2]))
        return name


def _field(key: str, schema: Any, required: bool, ctx: Context) -> _Field:
    kind = schema_type(schema, ctx, key)
    text = repr(kind.text) if kind.forward else kind.text
    description = comment_text(schema.get("description")) if isinstance(schema, dict) else ""
    comments = ([description] if description else []) + [f"Any: {r}" for r in kind.reasons]
    return _Field(key, text if required else f"NotRequired[{text}]", tuple(comments))


def _render_class(definition: _ClassDef) -> str:
    lines = [f"# {definition.doc}"] if definition.doc else []
    if all(is_python_name(f.key) and not f.key.startswith("__") for f in definition.fields):
        lines.append(f"class {definition.name}(TypedDict):")
        lines += _field_lines(definition.fields, "    ", "{key}: {annotation}")
    else:  # keys that are not identifiers (or would be name-mangled) need the functional syntax
        lines += [f"{definition.name} = TypedDict(", f'    "{definition.name}",', "    {"]
        lines += _field_lines(definition.fields, "        ", "{quoted}: {annotation},")
        lines += ["    },", ")"]
    return "\n".join(lines)


def _field_lines(fields: Iterable[_Field], indent: str, template: str) -> list[str]:
    lines: list[str] = []
    for f in fields:
        lines += [f"{indent}# {c}" for c in f.comments]
        lines.append(indent + template.format(key=f.key, quoted=json.dumps(f.key), annotation=f.annotation))
    return lines
