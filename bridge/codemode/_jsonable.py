"""Turns the run's result value into JSON, with documented fallbacks instead of crashes.

- dict, list, str, int, float, bool, None: as they are.
- tuple, set, frozenset: a list (sets sorted when their items can be sorted).
- dict keys that are not str: ``str(key)``.
- NaN and infinities, and any other object: ``repr(value)``, with a warning naming the type.
- a container that contains itself: ``"<circular reference>"``.
"""

from __future__ import annotations

import json
import math
from typing import Any

_MAX_DEPTH = 200


def to_jsonable(value: Any, warnings: list[str]) -> Any:
    """Returns a JSON-compatible copy of `value`, appending a note per fallback used."""
    return _convert(value, "result", warnings, set(), 0)


def _convert(value: Any, path: str, warnings: list[str], active: set[int], depth: int) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return _fallback(value, path, warnings)
    if depth >= _MAX_DEPTH:
        warnings.append(f"{path}: nested deeper than {_MAX_DEPTH} levels; cut to a string")
        return "<too deep>"
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        if id(value) in active:
            warnings.append(f"{path}: circular reference")
            return "<circular reference>"
        active.add(id(value))
        try:
            return _convert_container(value, path, warnings, active, depth + 1)
        finally:
            active.discard(id(value))
    return _fallback(value, path, warnings)


def _convert_container(value: Any, path: str, warnings: list[str], active: set[int], depth: int) -> Any:
    if isinstance(value, dict):
        return {
            (key if isinstance(key, str) else str(key)): _convert(item, f"{path}[{key!r}]", warnings, active, depth)
            for key, item in value.items()
        }
    if isinstance(value, (set, frozenset)):
        try:
            value = sorted(value)
        except TypeError:
            value = list(value)
    return [_convert(item, f"{path}[{index}]", warnings, active, depth) for index, item in enumerate(value)]


def _fallback(value: Any, path: str, warnings: list[str]) -> str:
    warnings.append(f"{path}: {type(value).__name__} is not JSON; returned as its repr()")
    return repr(value)


def dumps(value: Any) -> str:
    """Compact JSON text of an already converted value."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
