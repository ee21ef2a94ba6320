"""Reading JSON Schema documents: same-document ``$ref``, bounded walks, both dialects' spellings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import unquote

from wasmexec._tools.stubs._types import PyType, unique

#: Deeper schemas become ``Any``: keeps recursion far below Python's stack limit.
MAX_DEPTH: Final = 64
#: Schema nodes visited per annotation or example before giving up: bounds work on hostile schemas.
MAX_STEPS: Final = 20_000

#: Stands for "no such node" or "no such keyword", where None is a value.
MISSING: Final[Any] = object()
_TYPE_KEYWORDS: Final = ("type", "properties", "additionalProperties", "patternProperties", "items", "prefixItems")


class ClassWriter(Protocol):
    """Where a walk puts the classes it meets (`_writer.StubWriter` is the one).

    A protocol, so this module need not import the writer, which imports it.
    """

    def pending_name(self, schema: Any) -> str | None:
        """The name of the class being written for `schema`, used as a forward reference; None if none."""

    def typed_dict(self, schema: dict[str, Any], props: dict[str, Any], ctx: Context, hint: str) -> PyType:
        """The TypedDict written for an object schema with `props`."""


@dataclass
class Context:
    """One walk over a schema document: where refs point, where classes go, how far we went."""

    root: Any
    writer: ClassWriter | None = None
    expanding: set[int] = field(default_factory=set)  # ids of $ref targets being expanded
    depth: int = 0
    steps: int = 0


@contextmanager
def step(ctx: Context) -> Iterator[bool]:
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


def lookup(root: Any, ref: str) -> Any:
    """The node a same-document ``$ref`` (a JSON pointer fragment) names, or `MISSING`."""
    if not ref.startswith("#"):
        return MISSING
    fragment = unquote(ref[1:])
    if not fragment:
        return root
    if not fragment.startswith("/"):
        return MISSING  # plain-name anchors are not supported
    node = root
    for part in fragment[1:].split("/"):
        node = _child(node, part.replace("~1", "/").replace("~0", "~"))
    return node


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part, MISSING)
    if isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return MISSING


def resolve(schema: Any, root: Any) -> Any:
    """Follows a chain of same-document ``$ref``; returns the last schema reached."""
    for _ in range(MAX_DEPTH):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        target = lookup(root, ref) if isinstance(ref, str) else MISSING
        if target is MISSING:
            return schema
        schema = target
    return schema


def ref_view(schema: Any, root: Any) -> dict[str, Any]:
    """The schema's keywords over those of what its ``$ref`` points to."""
    if not isinstance(schema, dict):
        return {}
    target = resolve(schema, root)
    if target is schema or not isinstance(target, dict):
        return schema
    return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}


def declares_type(schema: dict[str, Any]) -> bool:
    """True when a keyword of `schema` says what type it is."""
    return any(key in schema for key in _TYPE_KEYWORDS)


def implied_type(schema: dict[str, Any]) -> str:
    """The type a schema without ``type`` implies by its other keywords."""
    return "array" if "items" in schema or "prefixItems" in schema else "object"


def required_keys(schema: Any) -> list[str]:
    """The ``required`` property names (strings only, without repeats)."""
    required = schema.get("required") if isinstance(schema, dict) else None
    return list(unique(r for r in required if isinstance(r, str))) if isinstance(required, list) else []


def properties_of(schema: Any) -> dict[str, Any]:
    """The ``properties`` of an object schema (empty when there are none)."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def array_parts(schema: dict[str, Any]) -> tuple[list[Any] | None, Any]:
    """A tuple's prefix (None for a plain list) and the schema of the items after it."""
    prefix, items = schema.get("prefixItems"), schema.get("items")
    if isinstance(prefix, list):
        return prefix, items
    if isinstance(items, list):
        return items, schema.get("additionalItems")
    return None, items


def merge_schemas(base: dict[str, Any], extra: Any) -> dict[str, Any]:
    """`extra`'s keywords over `base`'s, with properties merged and required keys united."""
    if not isinstance(extra, dict):
        return base
    merged = {**base, **extra}
    properties = {**properties_of(base), **properties_of(extra)}
    required = [*required_keys(base), *required_keys(extra)]
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = list(unique(required))
    return merged
