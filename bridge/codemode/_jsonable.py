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
#: A repr() longer than this is cut; a fallback should not blow the result size limit.
_MAX_REPR = 10_000


def _key_text(key: Any) -> str:
    try:
        return str(key)
    except Exception:
        return f"<unprintable {type(key).__name__}>"


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
        except RecursionError:
            raise
        except Exception:
            return _fallback(value, path, warnings)
        finally:
            active.discard(id(value))
    return _fallback(value, path, warnings)


def _convert_container(value: Any, path: str, warnings: list[str], active: set[int], depth: int) -> Any:
    if isinstance(value, dict):
        return {
            (key if isinstance(key, str) else _key_text(key)): _convert(
                item, f"{path}[{key!r}]", warnings, active, depth
            )
            for key, item in value.items()
        }
    if isinstance(value, (set, frozenset)):
        try:
            value = sorted(value)
        except Exception:
            value = list(value)
    return [_convert(item, f"{path}[{index}]", warnings, active, depth) for index, item in enumerate(value)]


def _fallback(value: Any, path: str, warnings: list[str]) -> str:
    warnings.append(f"{path}: {type(value).__name__} is not JSON; returned as its repr()")
    try:
        return repr(value)[:_MAX_REPR]
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def dumps(value: Any) -> str:
    """Compact JSON text of an already converted value."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
