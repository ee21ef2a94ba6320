"""JSON Schema to a Python type expression (objects become TypedDicts through a `StubWriter`)."""

from __future__ import annotations

from functools import reduce
from typing import Any, Final
from urllib.parse import unquote

from wasmexec._tools.stubs._schema import (
    MISSING,
    Context,
    array_parts,
    declares_type,
    implied_type,
    lookup,
    merge_schemas,
    properties_of,
    resolve,
    step,
)
from wasmexec._tools.stubs._text import pascal
from wasmexec._tools.stubs._types import ANY, NEVER, NONE, PyType, any_because, generic, literal, union

_SIMPLE_TYPES: Final = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_ANNOTATION_KEYWORDS: Final = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "$schema"}
)


def type_expression(schema: Any, root: Any = None) -> str:
    """A Python type expression for a JSON Schema, as source text.

    Objects with ``properties`` are ``dict[str, Any]`` here; use `StubWriter` for TypedDicts.

    Args:
        schema: The schema, or ``true``/``false``.
        root: The document ``$ref`` pointers are resolved against; `schema` itself when None.

    Returns:
        For example ``"list[str] | None"`` or ``"Literal['a', 'b']"``.
    """
    return schema_type(schema, Context(schema if root is None else root), "Model").text


def schema_type(schema: Any, ctx: Context, hint: str) -> PyType:
    """The type of `schema`; `hint` names a TypedDict made for it."""
    if schema is True:
        return ANY
    if schema is False:
        return NEVER
    if not isinstance(schema, dict):
        return any_because("the schema is not a JSON object")
    with step(ctx) as allowed:
        result = (
            _dispatch(schema, ctx, hint) if allowed else any_because("the schema is too large or too deeply nested")
        )
    return union([result, NONE]) if schema.get("nullable") is True else result


def _dispatch(schema: dict[str, Any], ctx: Context, hint: str) -> PyType:
    if "$ref" in schema:
        return _ref(schema["$ref"], ctx, hint)
    if "const" in schema:
        return literal([schema["const"]])
    if isinstance(schema.get("enum"), list):
        return literal(schema["enum"])
    if "allOf" in schema:
        return _all_of(schema, ctx, hint)
    if not declares_type(schema):
        return _untyped(schema, ctx, hint)
    kind = schema.get("type", implied_type(schema))
    if isinstance(kind, list):
        return union(_of_type(schema, k, ctx, hint) for k in kind)
    return _of_type(schema, kind, ctx, hint)


def _of_type(schema: dict[str, Any], kind: Any, ctx: Context, hint: str) -> PyType:
    if not isinstance(kind, str):
        return any_because(f"'type' {kind!r} is not a type name")
    if kind in _SIMPLE_TYPES:
        return PyType((_SIMPLE_TYPES[kind],))
    if kind == "array":
        return _array(schema, ctx, hint)
    if kind == "object":
        return _object(schema, ctx, hint)
    return any_because(f"unknown type {kind!r}")


def _untyped(schema: dict[str, Any], ctx: Context, hint: str) -> PyType:
    """A schema without type keywords: a union, something Python cannot say, or anything."""
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            return union(schema_type(m, ctx, _member_hint(m, hint)) for m in members)
    if "not" in schema:
        return any_because("'not' cannot be expressed as a Python type")
    if "if" in schema:
        return any_because("'if'/'then'/'else' cannot be expressed as a Python type")
    return ANY


def _member_hint(member: Any, hint: str) -> str:
    """Prefixes a union member's class name with its discriminator (a string ``const``), if any."""
    for sub in properties_of(member).values():
        if isinstance(sub, dict) and isinstance(sub.get("const"), str):
            return pascal(sub["const"]) + pascal(hint)
    return hint


def _ref(ref: Any, ctx: Context, hint: str) -> PyType:
    if not isinstance(ref, str):
        return any_because("'$ref' is not a string")
    if not ref.startswith("#"):
        return any_because(f"$ref {ref!r} points outside this schema")
    target = lookup(ctx.root, ref)
    if target is MISSING:
        return any_because(f"$ref {ref!r} does not resolve")
    pending = ctx.writer.pending_name(target) if ctx.writer else None
    if pending:
        return PyType((pending,), forward=True)
    if id(target) in ctx.expanding:
        return any_because(f"$ref {ref!r} refers to itself through a schema that is not an object")
    ctx.expanding.add(id(target))
    try:
        return schema_type(target, ctx, _ref_hint(ref, hint))
    finally:
        ctx.expanding.discard(id(target))


def _ref_hint(ref: str, hint: str) -> str:
    last = unquote(ref[1:]).rsplit("/", 1)[-1]
    return last.replace("~1", "/").replace("~0", "~") or hint


def _all_of(schema: dict[str, Any], ctx: Context, hint: str) -> PyType:
    members = schema["allOf"] if isinstance(schema["allOf"], list) else []
    parts = [m for m in members if _constrains(m)]
    rest = {k: v for k, v in schema.items() if k != "allOf"}
    if _constrains(rest):
        parts.append(rest)
    if len(parts) <= 1:
        return schema_type(parts[0], ctx, hint) if parts else ANY
    merged = _merge_objects([resolve(p, ctx.root) for p in parts])
    if merged is None:
        return any_because("'allOf' of several schemas that are not all objects")
    return schema_type(merged, ctx, hint)


def _constrains(schema: Any) -> bool:
    """False for schemas that accept everything: ``true``, ``{}``, or only annotations."""
    if isinstance(schema, dict):
        return any(key not in _ANNOTATION_KEYWORDS and key != "nullable" for key in schema)
    return schema is not True


def _merge_objects(parts: list[Any]) -> dict[str, Any] | None:
    """One object schema with the properties and required keys of all `parts`, if all are objects."""
    if not all(isinstance(p, dict) and (p.get("type") == "object" or "properties" in p) for p in parts):
        return None
    return reduce(merge_schemas, parts, {"type": "object"})


def _array(schema: dict[str, Any], ctx: Context, hint: str) -> PyType:
    prefix, rest = array_parts(schema)
    if prefix is None:
        return generic("list", [ANY if rest is None else schema_type(rest, ctx, f"{hint}Item")])
    parts = [schema_type(p, ctx, f"{hint}Item{i}") for i, p in enumerate(prefix, 1)]
    if rest is False:
        return generic("tuple", parts) if parts else PyType(("tuple[()]",))
    tail = ANY if rest is None else schema_type(rest, ctx, f"{hint}Item")
    if not parts:
        return generic("tuple", [tail, PyType(("...",))])
    return generic("tuple", [*parts, PyType((f"*tuple[{tail.text}, ...]",), (), tail.reasons, tail.forward)])


def _object(schema: dict[str, Any], ctx: Context, hint: str) -> PyType:
    props = properties_of(schema)
    if not props:
        return _mapping(schema, ctx, hint)
    if ctx.writer is None:
        return PyType(("dict[str, Any]",))
    return ctx.writer.typed_dict(schema, props, ctx, hint)


def _mapping(schema: dict[str, Any], ctx: Context, hint: str) -> PyType:
    """``dict[str, V]`` from ``patternProperties`` and ``additionalProperties``."""
    patterns = schema.get("patternProperties")
    values = [schema_type(s, ctx, f"{hint}Value") for s in patterns.values()] if isinstance(patterns, dict) else []
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        values.append(schema_type(extra, ctx, f"{hint}Value"))
    elif extra is True or (extra is None and not values):
        values.append(ANY)
    elif not values:
        values.append(NEVER)
    return generic("dict", [PyType(("str",)), union(values)])
