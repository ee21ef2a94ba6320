"""Observed return shapes: what the results of a tool without an ``outputSchema`` looked like.

A model that calls a tool without an output schema has to guess what comes back (the
filesystem server wraps text as ``{"content": ...}``, git returns free text). The broker
remembers the *shape* of each result it hands back, as a small JSON Schema (types and
key names, never values), merges it with the shapes seen before, and discovery shows it
as "observed returns".

What is kept is bounded, because results come from servers and may be hostile or huge:

* the walk visits at most `MAX_NODES` values and goes `MAX_DEPTH` containers deep; below
  that a value is "anything" (``{}``);
* only the first `MAX_ITEMS` items of an array are looked at;
* an object keeps its key names only when it has at most `MAX_KEYS` keys and every key
  looks like a field name (`FIELD_NAME`); otherwise its keys are data (file names, e-mail
  addresses, ids) and it becomes a mapping, ``{"type": "object", "additionalProperties": ...}``,
  with no key names at all;
* a shape over `MAX_SHAPE_CHARS` of JSON loses its deepest levels until it fits.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from wasmexec._tools.schema_cache import SchemaCache

#: Containers nested deeper than this are "anything": shapes are for orientation, not validation.
MAX_DEPTH: Final = 4
#: Values looked at per result.
MAX_NODES: Final = 200
#: Largest shape kept per tool, as JSON text; a bigger one loses its deepest levels.
MAX_SHAPE_CHARS: Final = 4_000
#: Array items looked at per array: results are mostly lists of one kind of thing.
MAX_ITEMS: Final = 20
#: Objects with more keys than this are mappings (keys are data), not records.
MAX_KEYS: Final = 32
#: What a field name looks like; any other key (a path, an address, a sentence) is data.
FIELD_NAME: Final = re.compile(r"[A-Za-z_$@][A-Za-z0-9_\-$]{0,63}\Z")

_TYPES: Final = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (type(None), "null"))


def shape_of(value: Any) -> dict[str, Any]:
    """The shape of one JSON value, as a JSON Schema with no values in it (see the module docstring)."""
    budget = [MAX_NODES]
    return _fit(_shape(value, 0, budget))


def _shape(value: Any, depth: int, budget: list[int]) -> dict[str, Any]:
    if budget[0] <= 0:
        return {}
    budget[0] -= 1
    for kind, name in _TYPES:
        if isinstance(value, kind):
            return {"type": name}
    if depth >= MAX_DEPTH:
        return {}
    if isinstance(value, list):
        items = [_shape(item, depth + 1, budget) for item in value[:MAX_ITEMS]]
        merged = _merge_all(items)
        return {"type": "array", "items": merged} if items else {"type": "array"}
    if isinstance(value, dict):
        if len(value) > MAX_KEYS or not all(isinstance(k, str) and FIELD_NAME.match(k) for k in value):
            values = [_shape(item, depth + 1, budget) for item in list(value.values())[:MAX_ITEMS]]
            return {"type": "object", "additionalProperties": _merge_all(values)} if values else {"type": "object"}
        properties = {key: _shape(item, depth + 1, budget) for key, item in value.items()}
        return {"type": "object", "properties": properties, "required": sorted(properties)}
    return {}


def merge(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """One shape that covers both: types united, keys seen every time required, the rest optional."""
    return _fit(new if old is None else _merge(old, new))


def _fit(shape: dict[str, Any]) -> dict[str, Any]:
    for depth in range(MAX_DEPTH, -1, -1):
        if len(json.dumps(shape)) <= MAX_SHAPE_CHARS:
            return shape
        shape = _cut(shape, depth)
    return shape


def _merge_all(shapes: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] | None = None
    for shape in shapes:
        merged = shape if merged is None else _merge(merged, shape)
    return merged if merged is not None else {}


def _members(shape: dict[str, Any]) -> list[dict[str, Any]]:
    return list(shape["anyOf"]) if "anyOf" in shape else [shape]


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    if a == {} or b == {}:
        return {}  # "anything" absorbs the rest
    by_type: dict[str, dict[str, Any]] = {}
    for member in _members(a) + _members(b):
        kind = member.get("type")
        if not isinstance(kind, str):
            return {}
        by_type[kind] = _merge_same(by_type[kind], member) if kind in by_type else member
    members = [by_type[kind] for kind in sorted(by_type, key=lambda k: (k == "null", k))]
    return members[0] if len(members) == 1 else {"anyOf": members}


def _merge_same(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    kind = a["type"]
    if kind == "array":
        if "items" not in a or "items" not in b:
            return a if "items" in a else b
        return {"type": "array", "items": _merge(a["items"], b["items"])}
    if kind != "object":
        return a
    if "properties" in a and "properties" in b:
        keys = {**a["properties"], **b["properties"]}
        if len(keys) <= MAX_KEYS:
            properties = {key: _merge_optional(a["properties"].get(key), b["properties"].get(key)) for key in keys}
            required = sorted(set(a.get("required", ())) & set(b.get("required", ())))
            return {"type": "object", "properties": properties, "required": required}
    values = [_values(a), _values(b)]
    present = [v for v in values if v is not None]
    return {"type": "object", "additionalProperties": _merge_all(present)} if present else {"type": "object"}


def _merge_optional(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    if a is None or b is None:
        return a if b is None else b  # type: ignore[return-value]  # one of them is set
    return _merge(a, b)


def _values(shape: dict[str, Any]) -> dict[str, Any] | None:
    """The shape of an object's values, whatever its keys."""
    if "additionalProperties" in shape:
        extra: dict[str, Any] = shape["additionalProperties"]
        return extra
    properties = list(shape.get("properties", {}).values())
    return _merge_all(properties) if properties else None


def _cut(shape: dict[str, Any], depth: int) -> dict[str, Any]:
    """`shape` with everything below `depth` containers made "anything"."""
    if depth <= 0:
        return {} if "type" not in shape or shape["type"] in ("object", "array") else shape
    if "anyOf" in shape:
        return {"anyOf": [_cut(m, depth) for m in shape["anyOf"]]}
    if "properties" in shape:
        return {**shape, "properties": {k: _cut(v, depth - 1) for k, v in shape["properties"].items()}}
    for key in ("items", "additionalProperties"):
        if key in shape:
            return {**shape, key: _cut(shape[key], depth - 1)}
    return shape


#: Tools remembered per server; a server with more is hostile or unusual, and the rest go unremembered.
MAX_TOOLS_PER_SERVER: Final = 1_000


def tool_digest(tool: dict[str, Any]) -> str:
    """Names one version of a tool's definition: a shape seen under another is not shown for it."""
    text = json.dumps(tool, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ObservedReturns:
    """The shapes seen per tool, kept in the schema cache beside the server's tool list.

    Stored under ``<listing key>#returns`` as ``{"tools": {name: {"tool": digest, "shape": schema}}}``,
    dropped whenever the tool list is (`invalidate`), and ignored for a tool whose definition has
    changed since (its digest differs). The file is written only when a shape changes.
    """

    def __init__(self, cache: SchemaCache) -> None:
        self._cache = cache
        self._lock = threading.Lock()  # stores of two tools of one server must not drop each other

    @staticmethod
    def _key(listing_key: str) -> str:
        return f"{listing_key}#returns"

    def get(self, listing_key: str, tool_name: str, digest: str) -> dict[str, Any] | None:
        """The shape seen for this version of the tool, or None."""
        entry = self._cache.get_stale(self._key(listing_key))
        record = entry.value.get("tools", {}).get(tool_name) if entry is not None else None
        if isinstance(record, dict) and record.get("tool") == digest and isinstance(record.get("shape"), dict):
            shape: dict[str, Any] = record["shape"]
            return shape
        return None

    def update(self, listing_key: str, tool_name: str, digest: str, value: Any) -> dict[str, Any] | None:
        """The tool's new shape if `value` adds to what was seen, else None (nothing to store).

        Cheap (work bounded by `shape_of`, no I/O), so it runs on the event loop; `store` writes."""
        old = self.get(listing_key, tool_name, digest)
        shape = merge(old, shape_of(value))
        return None if shape == old else shape

    def store(self, listing_key: str, tool_name: str, digest: str, shape: dict[str, Any]) -> None:
        """Merges `shape` into what is kept for the tool (writes the cache file: call it off the event loop).

        Merged again here, under a lock, because another call's shape may have been stored since `update`."""
        with self._lock:
            shape = merge(self.get(listing_key, tool_name, digest), shape)
            entry = self._cache.get_stale(self._key(listing_key))
            tools: dict[str, Any] = dict(entry.value.get("tools", {})) if entry is not None else {}
            if tool_name not in tools and len(tools) >= MAX_TOOLS_PER_SERVER:
                return
            tools[tool_name] = {"tool": digest, "shape": shape}
            self._cache.put(self._key(listing_key), {"tools": tools})

    def invalidate(self, listing_key: str) -> None:
        self._cache.invalidate(self._key(listing_key))
