"""Example payloads: a small value valid for a schema, shown in error messages and docstrings."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce
from typing import Any, Final

from wasmexec._tools.stubs._schema import (
    Context,
    array_parts,
    declares_type,
    implied_type,
    merge_schemas,
    properties_of,
    required_keys,
    resolve,
    step,
)

#: Example strings and arrays grow to ``minLength``/``minItems`` up to this size, not beyond.
MAX_EXAMPLE_SIZE: Final = 1_000

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


def example_payload(schema: Any, root: Any = None) -> Any:
    """A small value valid for `schema`, to show in error messages.

    Only required properties are filled; each value is the schema's ``const``, else its
    ``examples[0]``, ``default`` or ``example`` (the first of its type), else ``enum[0]``, else a
    placeholder for the type (``"string"``, ``0``, ``0.0``, ``True``, ``[]``, ``{}``).

    Args:
        schema: The schema.
        root: The document ``$ref`` pointers are resolved against; `schema` itself when None.
    """
    return _example(schema, Context(schema if root is None else root))


def _example(schema: Any, ctx: Context) -> Any:
    with step(ctx) as allowed:
        schema = resolve(schema, ctx.root)
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
            chosen = [resolve(m, root) for m in members]
            chosen = chosen if key == "allOf" else [_pick_option(chosen)]
            return reduce(merge_schemas, chosen, rest)
    return None


def _pick_option(options: list[Any]) -> Any:
    for option in options:
        if isinstance(option, dict) and option.get("type") != "null":
            return option
    return options[0]


def _declared_example(schema: dict[str, Any]) -> tuple[bool, Any]:
    """The schema's own value: ``const``, else ``examples[0]``, ``default`` or ``example`` (when of the
    schema's type and, with an ``enum``, in it), else ``enum[0]``."""
    if "const" in schema:
        return True, schema["const"]
    examples = schema.get("examples")
    candidates = examples[:1] if isinstance(examples, list) else []
    candidates += [schema[k] for k in ("default", "example") if k in schema]
    candidates = [c for c in candidates if _of_declared_type(c, schema)]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return True, next((c for c in candidates if c in enum), enum[0])
    return (True, candidates[0]) if candidates else (False, None)


_JSON_TYPES: Final[dict[str, Callable[[Any], bool]]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _of_declared_type(value: Any, schema: dict[str, Any]) -> bool:
    """False only when the schema names its types and `value` has none of them (a careless ``examples``)."""
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    checks = [_JSON_TYPES[k] for k in kinds if isinstance(k, str) and k in _JSON_TYPES]
    return not checks or any(check(value) for check in checks)


def _example_kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and declares_type(schema):
        kind = implied_type(schema)
    return kind if isinstance(kind, str) else ""


def _string_example(schema: dict[str, Any], ctx: Context) -> str:
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


def _array_example(schema: dict[str, Any], ctx: Context) -> list[Any]:
    prefix, rest = array_parts(schema)
    values = [_example(p, ctx) for p in prefix or []]
    wanted = min(_number(schema.get("minItems")) or 0, MAX_EXAMPLE_SIZE)
    if len(values) < wanted and rest is not False:
        values += [_example({} if rest is None else rest, ctx)] * int(wanted - len(values))
    return values


def _object_example(schema: dict[str, Any], ctx: Context) -> dict[str, Any]:
    props = properties_of(schema)
    extra = schema.get("additionalProperties")
    fallback = extra if isinstance(extra, dict) else {}
    return {key: _example(props.get(key, fallback), ctx) for key in required_keys(schema)}


_EXAMPLE_MAKERS: Final[dict[str, Callable[[dict[str, Any], Context], Any]]] = {
    "string": _string_example,
    "integer": lambda schema, ctx: _number_example(schema, integer=True),
    "number": lambda schema, ctx: _number_example(schema, integer=False),
    "boolean": lambda schema, ctx: True,
    "null": lambda schema, ctx: None,
    "array": _array_example,
    "object": _object_example,
}
