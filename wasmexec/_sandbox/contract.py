"""The host-call contract: what the guest may ask of the host, as one table.

``wasm_assets/wit/world.wit`` is the written contract between host and guest. This is its table
on the host: the `host` interface's enums (`ENUMS`: error kinds and call kinds, case for case, in
order) and its functions with each parameter's WIT type and bound (`FUNCTIONS`). A bound is the
most UTF-8 bytes (a string) or items (a list) of an argument the host reads: an argument over it
is dropped unread, before wasmtime-py lifts it (the component's trampolines, `hostcalls`) or
before it is decoded (the science image's door, `wasmexec._science.door`), and the host function
refuses it by its size. Every argument of variable size has a bound.

The kinds themselves are the tool-host protocol's (`wasmexec._runctx.toolhost`: the broker raises them);
the bounds' values are named where their reasons are (`_toolhost`, `_sampling`, `_runstate`, and
here for the catalog's). tests/unit/test_host_contract.py checks this table against the WIT text,
and the science guest's restated enums (bridge/codemode/_door.py, which cannot import the host)
against this table; the default guest's bindings are generated from the WIT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from wasmexec._runctx import llm_ask as _sampling
from wasmexec._runctx import runstate as _runstate
from wasmexec._runctx.toolhost import CALL_KINDS, MAX_NAME_CHARS, MAX_PAYLOAD_BYTES, ErrorKind

#: The WIT interface the guest imports.
INTERFACE = "wasmexec:sandbox/host@0.1.0"

#: Longest catalog operation name; the real ones are under 20 characters.
MAX_OP_CHARS = 64
#: Largest catalog request: real ones are a few names, a query and a limit.
MAX_REQUEST_BYTES = 64 * 1024
#: Longest handle list `wait` accepts: every call a run may have outstanding, and a margin.
MAX_WAIT_HANDLES = _runstate.MAX_OUTSTANDING_CALLS + _runstate.WAIT_HANDLE_MARGIN
#: UTF-8 takes at most this many bytes per character: a name over 4x its limit in bytes is over it.
MAX_UTF8_BYTES = 4

#: The WIT ``error-kind`` cases.
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)
#: The `host` interface's enums by WIT name: their cases, in order.
ENUMS: dict[str, tuple[str, ...]] = {"error-kind": ERROR_KINDS, "call-kind": CALL_KINDS}


@dataclass(frozen=True)
class Param:
    """One parameter of a host function."""

    name: str
    """Its WIT name."""
    wit_type: str
    """Its WIT type, as written in the world."""
    bound: int | None = None
    """The most UTF-8 bytes (string) or items (list) the host reads of it; None for a fixed-size type."""


_NAME_BYTES = MAX_NAME_CHARS * MAX_UTF8_BYTES

#: The `host` interface's functions by WIT name: their parameters, in order.
FUNCTIONS: dict[str, tuple[Param, ...]] = {
    "catalog": (
        Param("op", "string", MAX_OP_CHARS * MAX_UTF8_BYTES),
        Param("request-json", "string", MAX_REQUEST_BYTES),
    ),
    "start-call": (
        Param("server-id", "string", _NAME_BYTES),
        Param("name", "string", _NAME_BYTES),
        Param("arguments-json", "string", MAX_PAYLOAD_BYTES),
        Param("kind", "call-kind"),
    ),
    "start-sample": (
        Param("prompt", "string", _sampling.MAX_PROMPT_BYTES),
        Param("system", "string", _sampling.MAX_SYSTEM_BYTES),
        Param("max-tokens", "u32"),
    ),
    "wait": (Param("handles", "list<u64>", MAX_WAIT_HANDLES), Param("timeout-ms", "u32")),
}


def bounds(function: str) -> tuple[int | None, ...]:
    """Each parameter's bound of a host function, in order (`Param.bound`)."""
    return tuple(param.bound for param in FUNCTIONS[function])
