"""Python type information from MCP tool JSON Schemas: annotations, signatures, docstrings, stub modules.

A tool's ``inputSchema`` becomes a function signature (one parameter per property) and its
``outputSchema`` the return type. Both dialects met in practice are read: draft-07
(``definitions``, ``items`` as a list for tuples) from TypeScript servers and 2020-12 (``$defs``,
``prefixItems``) from Python servers.

Choices a reader of the output should know:

* An object with ``properties`` is a TypedDict when a `StubWriter` collects definitions and
  ``dict[str, Any]`` otherwise. Keys beyond ``properties`` are not typed.
* Keywords that only narrow a declared type (``not``, ``if``, ``oneOf`` beside ``type``) are
  ignored; a schema made only of what Python types cannot say is ``Any``, and the writer says why.
* A tuple that allows items after its prefix is ``tuple[A, B, *tuple[T, ...]]``.
* ``patternProperties`` give ``dict[str, P1 | P2]``; keys matching no pattern are not typed.
* Stub modules declare ``async def f(...) -> T: ...``: importable, and clean under mypy --strict
  except for its ``empty-body`` check (which does not apply to a ``.pyi`` copy).
* Work per schema is bounded (`MAX_DEPTH`, `MAX_STEPS`), so a hostile schema cannot stall the host,
  and server text reaches generated code only as comments, docstrings or literals, escaped.
"""

from __future__ import annotations

import json
import keyword
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Final, NamedTuple
from urllib.parse import unquote

#: Deeper schemas become ``Any``: keeps recursion far below Python's stack limit.
MAX_DEPTH: Final = 64
#: Schema nodes visited per annotation or example before giving up: bounds work on hostile schemas.
MAX_STEPS: Final = 20_000
#: Example strings and arrays grow to ``minLength``/``minItems`` up to this size, not beyond.
MAX_EXAMPLE_SIZE: Final = 1_000
#: Descriptions shown in comments are cut to this many characters.
COMMENT_WIDTH: Final = 100

#: What the docstring promises for a tool without ``outputSchema``.
NO_OUTPUT_SCHEMA_RESULT: Final = "the tool's result (text, or the whole result)"

_MISSING: Final[Any] = object()
_SIMPLE_TYPES: Final = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_TYPE_KEYWORDS: Final = ("type", "properties", "additionalProperties", "patternProperties", "items", "prefixItems")
_ANNOTATION_KEYWORDS: Final = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "$schema"}
)
_TYPING_NAMES: Final = ("Any", "Literal", "Never", "NotRequired", "TypedDict")
_RESERVED_NAMES: Final = frozenset({*_TYPING_NAMES, "None", "True", "False"})
_FORMAT_EXAMPLES: Final = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com",
    "uri-reference": "https://example.com",
    "url": "https://example.com",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "hostname": "example.com",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
}


# --- Types as text --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Type:
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


_ANY: Final = _Type(("Any",))
_NEVER: Final = _Type(("Never",))
_NONE: Final = _Type(("None",))


def _any(reason: str) -> _Type:
    return _Type(("Any",), reasons=(reason,))


def _unique(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


def _union(types: Iterable[_Type]) -> _Type:
    items = list(types)
    return _Type(
        members=_unique(m for t in items for m in t.members),
        literals=_unique(v for t in items for v in t.literals),
        reasons=_unique(r for t in items for r in t.reasons),
        forward=any(t.forward for t in items),
    )


def _generic(name: str, args: Sequence[_Type]) -> _Type:
    return _Type(
        (f"{name}[{', '.join(a.text for a in args)}]",),
        reasons=_unique(r for a in args for r in a.reasons),
        forward=any(a.forward for a in args),
    )


def _literal(values: Iterable[Any]) -> _Type:
    parts: list[_Type] = []
    for value in values:
        if value is None:
            parts.append(_NONE)
        elif isinstance(value, str | int):  # bool is an int
            parts.append(_Type(literals=(repr(value),)))
        else:
            parts.append(_Type((_value_type(value),)))
    return _union(parts) if parts else _NEVER


def _value_type(value: Any) -> str:
    if isinstance(value, float):
        return "float"
    if isinstance(value, list):
        return "list[Any]"
    return "dict[str, Any]" if isinstance(value, dict) else "Any"


# --- Reading schemas ------------------------------------------------------------------------


@dataclass
class _Context:
    """One walk over a schema document: where refs point, where classes go, how far we went."""

    root: Any
    writer: StubWriter | None = None
    expanding: set[int] = field(default_factory=set)  # ids of $ref targets being expanded
    depth: int = 0
    steps: int = 0


@contextmanager
def _step(ctx: _Context) -> Iterator[bool]:
    """Counts one schema node; yields False once the walk is too deep or too long."""
    if ctx.depth >= MAX_DEPTH or ctx.steps >= MAX_STEPS:
        yield False
        return
    ctx.depth += 1
    ctx.steps += 1
    try:
        yield True
    finally:
        ctx.depth -= 1


def _lookup(root: Any, ref: str) -> Any:
    """The node a same-document ``$ref`` (a JSON pointer fragment) names, or `_MISSING`."""
    if not ref.startswith("#"):
        return _MISSING
    fragment = unquote(ref[1:])
    if not fragment:
        return root
    if not fragment.startswith("/"):
        return _MISSING  # plain-name anchors are not supported
    node = root
    for part in fragment[1:].split("/"):
        node = _child(node, part.replace("~1", "/").replace("~0", "~"))
    return node


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part, _MISSING)
    if isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return _MISSING


def _resolve(schema: Any, root: Any) -> Any:
    """Follows a chain of same-document ``$ref``; returns the last schema reached."""
    for _ in range(MAX_DEPTH):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        target = _lookup(root, ref) if isinstance(ref, str) else _MISSING
        if target is _MISSING:
            return schema
        schema = target
    return schema


def _declares_type(schema: dict[str, Any]) -> bool:
    return any(key in schema for key in _TYPE_KEYWORDS)


def _implied_type(schema: dict[str, Any]) -> str:
    return "array" if "items" in schema or "prefixItems" in schema else "object"


def _required(schema: Any) -> list[str]:
    required = schema.get("required") if isinstance(schema, dict) else None
    return list(_unique(r for r in required if isinstance(r, str))) if isinstance(required, list) else []


def _properties(schema: Any) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def _array_parts(schema: dict[str, Any]) -> tuple[list[Any] | None, Any]:
    """A tuple's prefix (None for a plain list) and the schema of the items after it."""
    prefix, items = schema.get("prefixItems"), schema.get("items")
    if isinstance(prefix, list):
        return prefix, items
    if isinstance(items, list):
        return items, schema.get("additionalItems")
    return None, items


# --- Schema to type -------------------------------------------------------------------------


def _expr(schema: Any, ctx: _Context, hint: str) -> _Type:
    """The type of `schema`; `hint` names a TypedDict made for it."""
    if schema is True:
        return _ANY
    if schema is False:
        return _NEVER
    if not isinstance(schema, dict):
        return _any("the schema is not a JSON object")
    with _step(ctx) as allowed:
        result = _dispatch(schema, ctx, hint) if allowed else _any("the schema is too large or too deeply nested")
    return _union([result, _NONE]) if schema.get("nullable") is True else result


def _dispatch(schema: dict[str, Any], ctx: _Context, hint: str) -> _Type:
    if "$ref" in schema:
        return _ref(schema["$ref"], ctx, hint)
    if "const" in schema:
        return _literal([schema["const"]])
    if isinstance(schema.get("enum"), list):
        return _literal(schema["enum"])
    if "allOf" in schema:
        return _all_of(schema, ctx, hint)
    if not _declares_type(schema):
        return _untyped(schema, ctx, hint)
    kind = schema.get("type", _implied_type(schema))
    if isinstance(kind, list):
        return _union(_of_type(schema, k, ctx, hint) for k in kind)
    return _of_type(schema, kind, ctx, hint)


def _of_type(schema: dict[str, Any], kind: Any, ctx: _Context, hint: str) -> _Type:
    if not isinstance(kind, str):
        return _any(f"'type' {kind!r} is not a type name")
    if kind in _SIMPLE_TYPES:
        return _Type((_SIMPLE_TYPES[kind],))
    if kind == "array":
        return _array(schema, ctx, hint)
    if kind == "object":
        return _object(schema, ctx, hint)
    return _any(f"unknown type {kind!r}")


def _untyped(schema: dict[str, Any], ctx: _Context, hint: str) -> _Type:
    """A schema without type keywords: a union, something Python cannot say, or anything."""
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            return _union(_expr(m, ctx, _member_hint(m, hint)) for m in members)
    if "not" in schema:
        return _any("'not' cannot be expressed as a Python type")
    if "if" in schema:
        return _any("'if'/'then'/'else' cannot be expressed as a Python type")
    return _ANY


def _member_hint(member: Any, hint: str) -> str:
    """Prefixes a union member's class name with its discriminator (a string ``const``), if any."""
    for sub in _properties(member).values():
        if isinstance(sub, dict) and isinstance(sub.get("const"), str):
            return _pascal(sub["const"]) + _pascal(hint)
    return hint


def _ref(ref: Any, ctx: _Context, hint: str) -> _Type:
    if not isinstance(ref, str):
        return _any("'$ref' is not a string")
    if not ref.startswith("#"):
        return _any(f"$ref {ref!r} points outside this schema")
    target = _lookup(ctx.root, ref)
    if target is _MISSING:
        return _any(f"$ref {ref!r} does not resolve")
    pending = ctx.writer._pending_name(target) if ctx.writer else None
    if pending:
        return _Type((pending,), forward=True)
    if id(target) in ctx.expanding:
        return _any(f"$ref {ref!r} refers to itself through a schema that is not an object")
    ctx.expanding.add(id(target))
    try:
        return _expr(target, ctx, _ref_hint(ref, hint))
    finally:
        ctx.expanding.discard(id(target))


def _ref_hint(ref: str, hint: str) -> str:
    last = unquote(ref[1:]).rsplit("/", 1)[-1]
    return last.replace("~1", "/").replace("~0", "~") or hint


def _all_of(schema: dict[str, Any], ctx: _Context, hint: str) -> _Type:
    members = schema["allOf"] if isinstance(schema["allOf"], list) else []
    parts = [m for m in members if _constrains(m)]
    rest = {k: v for k, v in schema.items() if k != "allOf"}
    if _constrains(rest):
        parts.append(rest)
    if len(parts) <= 1:
        return _expr(parts[0], ctx, hint) if parts else _ANY
    merged = _merge_objects([_resolve(p, ctx.root) for p in parts])
    if merged is None:
        return _any("'allOf' of several schemas that are not all objects")
    return _expr(merged, ctx, hint)


def _constrains(schema: Any) -> bool:
    """False for schemas that accept everything: ``true``, ``{}``, or only annotations."""
    if isinstance(schema, dict):
        return any(key not in _ANNOTATION_KEYWORDS and key != "nullable" for key in schema)
    return schema is not True


def _merge_objects(parts: list[Any]) -> dict[str, Any] | None:
    """One object schema with the properties and required keys of all `parts`, if all are objects."""
    if not all(isinstance(p, dict) and (p.get("type") == "object" or "properties" in p) for p in parts):
        return None
    return reduce(_merge_schemas, parts, {"type": "object"})


def _merge_schemas(base: dict[str, Any], extra: Any) -> dict[str, Any]:
    """`extra`'s keywords over `base`'s, with properties merged and required keys united."""
    if not isinstance(extra, dict):
        return base
    merged = {**base, **extra}
    properties = {**_properties(base), **_properties(extra)}
    required = [*_required(base), *_required(extra)]
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = list(_unique(required))
    return merged


def _array(schema: dict[str, Any], ctx: _Context, hint: str) -> _Type:
    prefix, rest = _array_parts(schema)
    if prefix is None:
        return _generic("list", [_ANY if rest is None else _expr(rest, ctx, f"{hint}Item")])
    parts = [_expr(p, ctx, f"{hint}Item{i}") for i, p in enumerate(prefix, 1)]
    if rest is False:
        return _generic("tuple", parts) if parts else _Type(("tuple[()]",))
    tail = _ANY if rest is None else _expr(rest, ctx, f"{hint}Item")
    if not parts:
        return _generic("tuple", [tail, _Type(("...",))])
    return _generic("tuple", [*parts, _Type((f"*tuple[{tail.text}, ...]",), (), tail.reasons, tail.forward)])


def _object(schema: dict[str, Any], ctx: _Context, hint: str) -> _Type:
    props = _properties(schema)
    if not props:
        return _mapping(schema, ctx, hint)
    if ctx.writer is None:
        return _Type(("dict[str, Any]",))
    return ctx.writer._typed_dict(schema, props, ctx, hint)


def _mapping(schema: dict[str, Any], ctx: _Context, hint: str) -> _Type:
    """``dict[str, V]`` from ``patternProperties`` and ``additionalProperties``."""
    patterns = schema.get("patternProperties")
    values = [_expr(s, ctx, f"{hint}Value") for s in patterns.values()] if isinstance(patterns, dict) else []
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        values.append(_expr(extra, ctx, f"{hint}Value"))
    elif extra is True or (extra is None and not values):
        values.append(_ANY)
    elif not values:
        values.append(_NEVER)
    return _generic("dict", [_Type(("str",)), _union(values)])


def type_expression(schema: Any, root: Any = None) -> str:
    """A Python type expression for a JSON Schema, as source text.

    Objects with ``properties`` are ``dict[str, Any]`` here; use `StubWriter` for TypedDicts.

    Args:
        schema: The schema, or ``true``/``false``.
        root: The document ``$ref`` pointers are resolved against; `schema` itself when None.

    Returns:
        For example ``"list[str] | None"`` or ``"Literal['a', 'b']"``.
    """
    return _expr(schema, _Context(schema if root is None else root), "Model").text


# --- TypedDict definitions ------------------------------------------------------------------


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

    def _annotate(self, schema: Any, root: Any, hint: str) -> _Type:
        return _expr(schema, _Context(schema if root is None else root, self), hint)

    def _pending_name(self, schema: Any) -> str | None:
        name = self._pending.get(id(schema))
        if name:
            self._forward.add(name)
        return name

    def _typed_dict(self, schema: dict[str, Any], props: dict[str, Any], ctx: _Context, hint: str) -> _Type:
        key = (id(schema), id(ctx.root))
        if key in self._done:
            return _Type((self._done[key][2],))
        base = _class_base(hint)
        name = self._reserve(base)
        self._pending[id(schema)] = name
        required = _required(schema)
        try:
            fields = tuple(_field(k, sub, k in required, ctx) for k, sub in props.items())
        finally:
            del self._pending[id(schema)]
        name = self._finish((base, _comment_text(schema.get("description")), fields), name)
        self._done[key] = (schema, ctx.root, name)
        return _Type((name,))

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


def _field(key: str, schema: Any, required: bool, ctx: _Context) -> _Field:
    kind = _expr(schema, ctx, key)
    text = repr(kind.text) if kind.forward else kind.text
    description = _comment_text(schema.get("description")) if isinstance(schema, dict) else ""
    comments = ([description] if description else []) + [f"Any: {r}" for r in kind.reasons]
    return _Field(key, text if required else f"NotRequired[{text}]", tuple(comments))


def _render_class(definition: _ClassDef) -> str:
    lines = [f"# {definition.doc}"] if definition.doc else []
    if all(_is_python_name(f.key) and not f.key.startswith("__") for f in definition.fields):
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


# --- Names and text -------------------------------------------------------------------------


def _class_base(hint: str) -> str:
    """A PascalCase class name for `hint`, before making it unique."""
    base = _pascal(hint) or "Model"
    return f"T{base}" if base[0].isdigit() else base


def _pascal(text: str) -> str:
    return "".join(word[0].upper() + word[1:] for word in re.findall(r"[A-Za-z0-9]+", text))


def _is_python_name(name: str) -> bool:
    """True for names usable as they are: identifiers, not keywords, unchanged by NFKC normalization."""
    return name.isidentifier() and not keyword.iskeyword(name) and unicodedata.normalize("NFKC", name) == name


def _one_line(text: Any) -> str:
    """`text` on one line with control characters gone: safe inside a comment or an Args line."""
    if not isinstance(text, str):
        return ""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def _shown_name(name: str) -> str:
    """A property name for prose: as it is when it is a Python name, else as a JSON string."""
    return name if _is_python_name(name) else json.dumps(name)


def _comment_text(text: Any) -> str:
    line = _one_line(text)
    return line if len(line) <= COMMENT_WIDTH else line[: COMMENT_WIDTH - 3].rstrip() + "..."


def _docstring_literal(text: str) -> str:
    """A triple-quoted literal whose value is exactly `text`."""
    body = text.replace("\\", "\\\\")
    body = "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii") for c in body)
    body = re.sub(r'"(?="|\Z)', r"\"", body)
    return f'"""{body}"""'


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.split("\n"))


# --- Tools ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Param:
    name: str
    python_name: str | None
    kind: _Type
    required: bool
    default: Any  # _MISSING when the schema has none
    description: str
    enum: list[Any] | None
    schema: Any


def _params(tool: Mapping[str, Any], writer: StubWriter | None) -> list[_Param]:
    """One parameter per input property: required ones first, schema order within each group."""
    root = tool.get("inputSchema")
    schema = _resolve(root, root)
    props = _properties(schema)
    required = _required(schema)
    ctx = _Context(root, writer)
    params = [_param(key, sub, key in required, ctx) for key, sub in props.items()]
    return sorted(params, key=lambda p: not p.required)


def _param(key: str, schema: Any, required: bool, ctx: _Context) -> _Param:
    view = _view(schema, ctx.root)
    enum = view.get("enum")
    return _Param(
        name=key,
        python_name=key if _is_python_name(key) else None,
        kind=_expr(schema, ctx, key),
        required=required,
        default=view.get("default", _MISSING),
        description=view["description"] if isinstance(view.get("description"), str) else "",
        enum=list(enum) if isinstance(enum, list) else None,
        schema=schema,
    )


def _view(schema: Any, root: Any) -> dict[str, Any]:
    """The schema's keywords over those of what its ``$ref`` points to."""
    if not isinstance(schema, dict):
        return {}
    target = _resolve(schema, root)
    if target is schema or not isinstance(target, dict):
        return schema
    return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}


def _returns(tool: Mapping[str, Any], export_name: str, writer: StubWriter | None) -> _Type:
    schema = tool.get("outputSchema")
    if schema is None:
        return _ANY
    if writer is not None:
        return writer._annotate(schema, schema, f"{export_name}Result")
    return _expr(schema, _Context(schema), "Result")


def _check_export_name(name: str) -> None:
    if not _is_python_name(name):
        raise ValueError(f"export name {name!r} is not a Python identifier")


def tool_parameters(tool: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool's parameters, required ones first, each in schema order.

    Args:
        tool: A tool in MCP wire form (``name``, ``inputSchema``, ...).

    Returns:
        Dicts with ``name`` (the property name), ``python_name`` (None when the name is not a usable
        identifier), ``annotation``, ``required``, ``default`` (only when the schema has one),
        ``description`` and ``enum`` (only when the schema has one).
    """
    return [_parameter_entry(p) for p in _params(tool, None)]


def _parameter_entry(param: _Param) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": param.name,
        "python_name": param.python_name,
        "annotation": param.kind.text,
        "required": param.required,
    }
    if param.default is not _MISSING:
        entry["default"] = param.default
    entry["description"] = param.description
    if param.enum is not None:
        entry["enum"] = param.enum
    return entry


def tool_signature(export_name: str, tool: Mapping[str, Any]) -> str:
    """The ``async def`` line (without the colon) a stub shows for a tool.

    Required parameters come first; optional ones are keyword-only and default to their JSON
    default, else None (so a caller should leave out optional arguments left at None). Parameters
    whose names are not usable identifiers are left out, and a ``**extra: Any`` catch-all (renamed
    if a parameter is called ``extra``) stands for them. The return type is that of
    ``outputSchema`` (the structured content), else ``Any``.

    Raises:
        ValueError: `export_name` is not a Python identifier.
    """
    _check_export_name(export_name)
    return _signature(export_name, _params(tool, None), _returns(tool, export_name, None))


def _signature(export_name: str, params: list[_Param], returns: _Type) -> str:
    named = [p for p in params if p.python_name]
    parts = [f"{p.python_name}: {p.kind.text}" for p in named if p.required]
    optional = [_optional_parameter(p) for p in named if not p.required]
    if optional:
        parts += ["*", *optional]
    if len(named) < len(params):
        parts.append(f"**{_extra_name(params)}: Any")
    return f"async def {export_name}({', '.join(parts)}) -> {returns.text}"


def _optional_parameter(param: _Param) -> str:
    if param.default is _MISSING or param.default is None:
        return f"{param.python_name}: {_union([param.kind, _NONE]).text} = None"
    return f"{param.python_name}: {param.kind.text} = {param.default!r}"


def _extra_name(params: list[_Param]) -> str:
    taken = {p.name for p in params}
    name = "extra"
    while name in taken:
        name += "_"
    return name


def tool_docstring(export_name: str, tool: Mapping[str, Any]) -> str:
    """The docstring a stub shows for a tool: summary, description, Args, Returns, Example.

    Args:
        export_name: The function name the example call uses.
        tool: A tool in MCP wire form.
    """
    return _docstring(export_name, tool, _params(tool, None), None)


def _docstring(export_name: str, tool: Mapping[str, Any], params: list[_Param], writer: StubWriter | None) -> str:
    sections = [
        _summary(tool),
        _args_section(params),
        _returns_section(tool, export_name, writer),
        _example_section(export_name, tool, params),
    ]
    return "\n\n".join(s for s in sections if s)


def _summary(tool: Mapping[str, Any]) -> str:
    description = tool.get("description")
    text = description.replace("\r\n", "\n").replace("\r", "\n").strip() if isinstance(description, str) else ""
    first, _, rest = text.partition("\n")
    first = first.strip() or f"Calls tool {_one_line(tool.get('name'))}."
    return f"{first}\n\n{rest.strip()}" if rest.strip() else first


def _args_section(params: list[_Param]) -> str:
    if not params:
        return ""
    return "Args:\n" + "\n".join(f"    {_arg_line(p)}" for p in params)


def _arg_line(param: _Param) -> str:
    facts = [param.kind.text, "required" if param.required else "optional"]
    if param.default is not _MISSING:
        facts.append(f"default {param.default!r}")
    if param.enum is not None:
        facts.append(f"one of {param.enum!r}")
    if param.python_name is None:
        facts.append(f"not a Python name, pass it in **{{{json.dumps(param.name)}: ...}}")
    head = f"{_shown_name(param.name)} ({', '.join(facts)})"
    description = _one_line(param.description)
    return f"{head}: {description}" if description else head


def _returns_section(tool: Mapping[str, Any], export_name: str, writer: StubWriter | None) -> str:
    schema = tool.get("outputSchema")
    if schema is None:
        return f"Returns:\n    {NO_OUTPUT_SCHEMA_RESULT}"
    line = _returns(tool, export_name, writer).text + _keys_note(schema, writer)
    description = _one_line(_view(schema, schema).get("description"))
    return f"Returns:\n    {line}: {description}" if description else f"Returns:\n    {line}"


def _keys_note(schema: Any, writer: StubWriter | None) -> str:
    """`` with keys a (str), b (int, optional)`` for an object output."""
    target = _resolve(schema, schema)
    required = _required(target)
    ctx = _Context(schema, writer)
    keys = [
        f"{_shown_name(key)} ({_expr(sub, ctx, key).text}{'' if key in required else ', optional'})"
        for key, sub in _properties(target).items()
    ]
    return f" with keys {', '.join(keys)}" if keys else ""


def _example_section(export_name: str, tool: Mapping[str, Any], params: list[_Param]) -> str:
    root = tool.get("inputSchema")
    required = [p for p in params if p.required]
    args = [f"{p.python_name}={example_payload(p.schema, root)!r}" for p in required if p.python_name]
    extra = {p.name: example_payload(p.schema, root) for p in required if not p.python_name}
    if extra:
        args.append(f"**{extra!r}")
    return f"Example:\n    await {export_name}({', '.join(args)})"


# --- Stub modules ---------------------------------------------------------------------------


class _Function(NamedTuple):
    signature: str
    text: str


def module_stub(module_name: str, server_id: str, tools: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """An importable Python module declaring one ``async def`` per tool, with the TypedDicts they use.

    Args:
        module_name: The name the guest imports the tools under, for the module docstring.
        server_id: The configured server, for the module docstring.
        tools: ``(export_name, tool)`` pairs, in the order the functions should appear.

    Raises:
        ValueError: An export name is not a Python identifier or appears twice.
    """
    names = [name for name, _ in tools]
    for name in names:
        _check_export_name(name)
    if len(set(names)) < len(names):
        raise ValueError(f"export names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    writer = StubWriter(reserved=names)
    functions = [_function(name, tool, writer) for name, tool in tools]
    classes = writer.render()
    head = _module_head(module_name, server_id, names, [classes, *(f.signature for f in functions)])
    return "\n\n\n".join(part for part in (head, classes, *(f.text for f in functions)) if part) + "\n"


def _function(export_name: str, tool: Mapping[str, Any], writer: StubWriter) -> _Function:
    params = _params(tool, writer)
    returns = _returns(tool, export_name, writer)
    notes = [f"# {_one_line(p.name)}: Any: {_one_line(r)}" for p in params for r in p.kind.reasons]
    notes += [f"# returns: Any: {_one_line(r)}" for r in returns.reasons]
    signature = _signature(export_name, params, returns)
    docstring = _indent(_docstring_literal(_docstring(export_name, tool, params, writer) + "\n"), "    ")
    return _Function(signature, "\n".join([*notes, f"{signature}:", docstring, "    ..."]))


def _module_head(module_name: str, server_id: str, names: list[str], code: list[str]) -> str:
    doc = (
        f"Typed stubs for the tools of MCP server {server_id}, imported as {module_name}.\n\n"
        "Generated by wasmexec from the tools' JSON Schemas: regenerate rather than edit.\n"
    )
    lines = [_docstring_literal(doc), "", "from __future__ import annotations"]
    used = _typing_names_used(code)
    if used:
        lines += ["", f"from typing import {', '.join(used)}"]
    lines += ["", _all_assignment(names)]
    return "\n".join(lines)


def _all_assignment(names: list[str]) -> str:
    line = f"__all__ = {json.dumps(sorted(names))}"
    if len(line) <= COMMENT_WIDTH:
        return line
    return "__all__ = [\n" + "".join(f'    "{name}",\n' for name in sorted(names)) + "]"


def _typing_names_used(code: list[str]) -> list[str]:
    lines = [line for text in code for line in text.split("\n") if not line.lstrip().startswith("#")]
    found = set(re.findall(r"\b(?:" + "|".join(_TYPING_NAMES) + r")\b", "\n".join(lines)))
    return [name for name in _TYPING_NAMES if name in found]


# --- Examples -------------------------------------------------------------------------------


def example_payload(schema: Any, root: Any = None) -> Any:
    """A small value valid for `schema`, to show in error messages.

    Only required properties are filled; values come from ``const``, ``default``, ``examples``,
    ``enum`` or a placeholder for the type (``"string"``, ``0``, ``0.0``, ``True``, ``[]``, ``{}``).

    Args:
        schema: The schema.
        root: The document ``$ref`` pointers are resolved against; `schema` itself when None.
    """
    return _example(schema, _Context(schema if root is None else root))


def _example(schema: Any, ctx: _Context) -> Any:
    with _step(ctx) as allowed:
        schema = _resolve(schema, ctx.root)
        if not allowed or not isinstance(schema, dict):
            return None
        combined = _combined(schema, ctx.root)
        if combined is not None:
            return _example(combined, ctx)
        found, value = _declared_example(schema)
        if found:
            return value
        maker = _EXAMPLE_MAKERS.get(_example_kind(schema))
        return maker(schema, ctx) if maker else None


def _combined(schema: dict[str, Any], root: Any) -> dict[str, Any] | None:
    """The schema with its first combinator folded in (``anyOf``/``oneOf``: one member), or None."""
    for key in ("allOf", "anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            rest = {k: v for k, v in schema.items() if k != key}
            chosen = [_resolve(m, root) for m in members]
            chosen = chosen if key == "allOf" else [_pick_option(chosen)]
            return reduce(_merge_schemas, chosen, rest)
    return None


def _pick_option(options: list[Any]) -> Any:
    for option in options:
        if isinstance(option, dict) and option.get("type") != "null":
            return option
    return options[0]


def _declared_example(schema: dict[str, Any]) -> tuple[bool, Any]:
    if "const" in schema:
        return True, schema["const"]
    examples = schema.get("examples")
    candidates = [schema[k] for k in ("default", "example") if k in schema]
    candidates += examples[:1] if isinstance(examples, list) else []
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return True, next((c for c in candidates if c in enum), enum[0])
    return (True, candidates[0]) if candidates else (False, None)


def _example_kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and _declares_type(schema):
        kind = _implied_type(schema)
    return kind if isinstance(kind, str) else ""


def _string_example(schema: dict[str, Any], ctx: _Context) -> str:
    fmt = schema.get("format")
    text = _FORMAT_EXAMPLES.get(fmt, "string") if isinstance(fmt, str) else "string"
    low, high = _number(schema.get("minLength")), _number(schema.get("maxLength"))
    if low is not None and len(text) < low:
        text += "x" * int(min(low, MAX_EXAMPLE_SIZE) - len(text))
    if high is not None and len(text) > high:
        text = text[: max(int(high), 0)]
    return text


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


def _number_example(schema: dict[str, Any], integer: bool) -> float:
    """0 when allowed, else a value at, next to or between the bounds that satisfies all of them."""
    lows = _limits(schema, "minimum", "exclusiveMinimum")
    highs = _limits(schema, "maximum", "exclusiveMaximum")
    points = [0.0, *(p for bound, _ in lows + highs for p in (bound, bound + 1, bound - 1))]
    if lows and highs:
        points.append((max(b for b, _ in lows) + min(b for b, _ in highs)) / 2)
    candidates = [c for p in points for c in ((math.ceil(p), math.floor(p)) if integer else (float(p),))]
    return next((c for c in candidates if _within(c, lows, highs)), candidates[0])


def _limits(schema: dict[str, Any], inclusive: str, exclusive: str) -> list[tuple[float, bool]]:
    """Bounds as ``(value, strict)``; draft-04 spells "strict" as a boolean ``exclusive*`` flag."""
    flag = schema.get(exclusive)
    found = [(bound, flag is True) for bound in [_number(schema.get(inclusive))] if bound is not None]
    return found + [(bound, True) for bound in [_number(flag)] if bound is not None]


def _within(value: float, lows: list[tuple[float, bool]], highs: list[tuple[float, bool]]) -> bool:
    above = all(value > b if strict else value >= b for b, strict in lows)
    return above and all(value < b if strict else value <= b for b, strict in highs)


def _array_example(schema: dict[str, Any], ctx: _Context) -> list[Any]:
    prefix, rest = _array_parts(schema)
    values = [_example(p, ctx) for p in prefix or []]
    wanted = min(_number(schema.get("minItems")) or 0, MAX_EXAMPLE_SIZE)
    if len(values) < wanted and rest is not False:
        values += [_example({} if rest is None else rest, ctx)] * int(wanted - len(values))
    return values


def _object_example(schema: dict[str, Any], ctx: _Context) -> dict[str, Any]:
    props = _properties(schema)
    extra = schema.get("additionalProperties")
    fallback = extra if isinstance(extra, dict) else {}
    return {key: _example(props.get(key, fallback), ctx) for key in _required(schema)}


_EXAMPLE_MAKERS: Final[dict[str, Callable[[dict[str, Any], _Context], Any]]] = {
    "string": _string_example,
    "integer": lambda schema, ctx: _number_example(schema, integer=True),
    "number": lambda schema, ctx: _number_example(schema, integer=False),
    "boolean": lambda schema, ctx: True,
    "null": lambda schema, ctx: None,
    "array": _array_example,
    "object": _object_example,
}
