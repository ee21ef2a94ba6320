"""The host-call contract table (`wasmexec._sandbox.contract`) says what `world.wit` says.

The WIT text is parsed here (its enums and the `host` functions' parameters) and compared with
the table the host functions, the science door and their bounds read; the science guest's own
restatement of the enums (bridge/codemode/_door.py, which cannot import the host) is compared
with the table too. Any drift fails here, before a guest meets it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from wasmexec._sandbox import contract

ROOT = Path(__file__).resolve().parents[2]
WIT = ROOT / "wasm_assets" / "wit" / "world.wit"
SCIENCE_BINDINGS = ROOT / "bridge" / "codemode" / "_door.py"


def _host_interface(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    match = re.search(r"interface\s+host\s*\{(.*)\}\s*world\b", text, re.DOTALL)
    assert match, f"no `interface host` in {WIT}"
    return match.group(1)


def _wit_enums(body: str) -> dict[str, tuple[str, ...]]:
    return {
        name: tuple(case.strip() for case in cases.split(",") if case.strip())
        for name, cases in re.findall(r"enum\s+([\w-]+)\s*\{(.*?)\}", body, re.DOTALL)
    }


def _wit_functions(body: str) -> dict[str, tuple[tuple[str, str], ...]]:
    functions = {}
    for name, params in re.findall(r"([\w-]+)\s*:\s*func\s*\((.*?)\)", body, re.DOTALL):
        pairs = [param.split(":", 1) for param in params.split(",") if param.strip()]
        functions[name] = tuple((param.strip(), wit_type.strip()) for param, wit_type in pairs)
    return functions


def _package(text: str) -> str:
    match = re.search(r"package\s+([\w-]+):([\w-]+)@([\w.]+)\s*;", text)
    assert match
    namespace, package, version = match.groups()
    return f"{namespace}:{package}/host@{version}"


def test_the_enums_are_the_wit_enums_case_for_case_in_order() -> None:
    assert contract.ENUMS == _wit_enums(_host_interface(WIT.read_text()))


def test_the_functions_and_their_parameters_are_the_wit_host_functions() -> None:
    table = {name: tuple((p.name, p.wit_type) for p in params) for name, params in contract.FUNCTIONS.items()}
    assert table == _wit_functions(_host_interface(WIT.read_text()))
    assert contract.INTERFACE == _package(WIT.read_text())


def test_every_argument_of_variable_size_has_a_bound_and_no_other_has_one() -> None:
    for name, params in contract.FUNCTIONS.items():
        for param in params:
            sized = param.wit_type == "string" or param.wit_type.startswith("list<")
            assert (param.bound is not None) == sized, (name, param)
            assert param.bound is None or param.bound > 0


def _science_bindings() -> ModuleType:
    spec = importlib.util.spec_from_file_location("science_door_bindings", SCIENCE_BINDINGS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)  # plain Python: `_host` is imported only when a call is made
    finally:
        del sys.modules[spec.name]
    return module


def test_the_science_guest_restates_the_enums_as_the_table_has_them() -> None:
    bindings = _science_bindings()
    for wit_name, enum in (("error-kind", bindings.ErrorKind), ("call-kind", bindings.CallKind)):
        cases = tuple(member.name.lower().replace("_", "-") for member in enum)
        assert cases == contract.ENUMS[wit_name]
        assert [member.value for member in enum] == list(range(len(cases)))  # in the WIT order


def test_the_parser_reads_a_changed_world() -> None:
    body = _host_interface(WIT.read_text().replace("tool-raw,", "tool-raw, tool-new,").replace(
        "timeout-ms: u32)", "timeout-ms: u64)"))  # fmt: skip
    assert _wit_enums(body)["call-kind"] != contract.ENUMS["call-kind"]
    assert _wit_functions(body)["wait"] == (("handles", "list<u64>"), ("timeout-ms", "u64"))


def test_the_host_registers_each_function_of_the_table_once() -> None:
    from wasmexec._sandbox import hostcalls

    assert list(hostcalls.HOST_FUNCTIONS) == list(contract.FUNCTIONS)


def test_no_module_reaches_into_the_host_functions_private_names() -> None:
    # The science door answers through the same host functions: through their public hooks only.
    reaching = [
        f"{path.name}: hostcalls.{node.attr}"
        for path in sorted((ROOT / "wasmexec").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id == "hostcalls" and node.attr.startswith("_")
    ]  # fmt: skip
    assert reaching == []
