"""Turns the run's result value into JSON, with documented fallbacks instead of crashes.

- dict, list, str, int, float, bool, None: as they are.
- tuple, set, frozenset: a list (sets sorted when their items can be sorted).
- dict keys that are not str: ``str(key)``.
- datetime, date and time (and pandas ``Timestamp``): ``value.isoformat()``.
- numpy arrays: nested lists (``tolist()``); numpy scalars: the Python number or bool.
- pandas ``Series``: a list of its values when its index is the default 0..n-1, else a dict of
  ``str(label)``: value; ``DataFrame``: records, a list of ``{column: value}`` dicts, with a
  non-default index first made columns (``reset_index()``); ``Index``: a list; ``NA``/``NaT``: null.
- NaN and infinities, and any other object: ``repr(value)``, with a warning naming the type.
- a container that contains itself: ``"<circular reference>"``.
"""

from __future__ import annotations

import datetime
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
    try:
        converted = _from_numpy_or_pandas(value)
        plain = converted() if converted is not _NOT_ARRAY else _NOT_ARRAY
    except (RecursionError, MemoryError):
        raise
    except Exception:  # the code's own class posing as one (its __module__ says "numpy")
        return _fallback(value, path, warnings)
    if plain is not _NOT_ARRAY:
        return _convert(plain, path, warnings, active, depth + 1)
    if isinstance(value, (datetime.date, datetime.time)):  # after pandas: its NaT is a datetime too
        return value.isoformat()
    return _fallback(value, path, warnings)


_NOT_ARRAY: Any = object()


def _from_numpy_or_pandas(value: Any) -> Any:
    """How to turn a numpy or pandas value into plain Python (a function), else `_NOT_ARRAY`.

    Recognised by the type's module, so the default image (no numpy) pays one attribute read.
    """
    kind = type(value)
    module = getattr(kind, "__module__", None)
    package = module.partition(".")[0] if isinstance(module, str) else None
    if package == "numpy" and hasattr(value, "tolist"):
        return value.tolist  # ndarray: nested lists; a numpy scalar: its Python value
    if package != "pandas":
        return _NOT_ARRAY
    name = kind.__name__
    if name == "DataFrame":
        return lambda: (value if _default_index(value.index) else value.reset_index()).to_dict(orient="records")
    if name == "Series":
        if _default_index(value.index):
            return value.tolist
        return lambda: {_key_text(label): item for label, item in value.items()}
    if name.endswith("Index") or name.endswith("Array"):
        return value.tolist
    if name in ("NAType", "NaTType"):
        return lambda: None
    return _NOT_ARRAY


def _default_index(index: Any) -> bool:
    """Whether a pandas index is the default 0, 1, …, n-1 (it then carries nothing worth returning)."""
    return type(index).__name__ == "RangeIndex" and index.start == 0 and index.step == 1 and index.name is None


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


#: Made once (in the snapshot): `json.dumps` with arguments builds a new encoder per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder `_ENCODER.encode` builds on every call, built once: a quarter of the instructions for a small
# value (`JSONEncoder.encode` makes it, a markers dict and a chunk list per call). No markers, so no cycle
# check: `to_jsonable`'s output is new containers, without cycles, nested at most _MAX_DEPTH deep.
_C_ENCODE = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODER = (
    _C_ENCODE(None, _not_json, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    if _C_ENCODE is not None
    else None
)


def dumps(value: Any) -> str:
    """Compact JSON text of an already converted value."""
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODER(value, 0))
