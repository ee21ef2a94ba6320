"""The run contract through the real component: result handoff, errors, diagnostics, stdlib."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.helpers import data_of, diagnostic, error_of, log_text
from wasmexec import Limits, Sandbox


def test_the_global_result_is_the_runs_data(sandbox: Sandbox) -> None:
    assert data_of(sandbox.run_sync("result = {'a': [1, 2.5, None, True, 'x']}")) == {"a": [1, 2.5, None, True, "x"]}


def test_a_final_expression_is_the_data_when_result_is_not_set(sandbox: Sandbox) -> None:
    assert data_of(sandbox.run_sync("x = 20\nx * 2 + 2")) == 42


def test_result_wins_over_a_final_expression(sandbox: Sandbox) -> None:
    assert data_of(sandbox.run_sync("result = 'r'\n'last'")) == "r"


def test_data_is_null_without_result_or_final_expression(sandbox: Sandbox) -> None:
    assert data_of(sandbox.run_sync("x = 1")) is None
    assert data_of(sandbox.run_sync("")) is None


def test_the_envelope_carries_ids_digests_and_metrics(sandbox: Sandbox, runtime) -> None:
    code = "result = 7"
    result = sandbox.run_sync(code)
    assert result["tool_name"] == "run_python"
    assert result["input_digest"] == "sha256:" + hashlib.sha256(code.encode()).hexdigest()
    assert result["sandbox_image"] == runtime.sandbox_image
    assert result["approval_state"] == "NOT_REQUIRED"
    assert len(result["run_id"]) == 32 and result["run_id"] != result["trace_id"]
    metrics = result["result"]["metrics"]
    assert metrics["fuel_used"] is None and metrics["tool_calls"] == 0 and metrics["duration_ms"] > 0
    assert sandbox.run_sync(code, Limits(fuel=10**9))["result"]["metrics"]["fuel_used"] > 0
    assert result["tool_trace"] == []


def test_the_output_digest_depends_on_the_output_only(sandbox: Sandbox) -> None:
    first, second = sandbox.run_sync("result = 7"), sandbox.run_sync("result = 3 + 4")
    assert first["output_digest"] == second["output_digest"]
    assert first["output_digest"] != sandbox.run_sync("result = 8")["output_digest"]


def test_print_goes_to_log_and_stderr_to_error_in_order(sandbox: Sandbox) -> None:
    result = sandbox.run_sync("import sys\nprint('one')\nprint('two', file=sys.stderr)\nprint('three')")
    assert [(e["level"], e["message"]) for e in result["logs"]] == [("log", "one"), ("error", "two"), ("log", "three")]


def test_a_syntax_error_reports_the_line(sandbox: Sandbox) -> None:
    result = sandbox.run_sync("x = 1\ny = (\n")
    assert error_of(result)["type"] == "SyntaxError"
    found = diagnostic(result, "SYNTAX_ERROR")
    assert found["line"] == 2 and found["hint"]


def test_a_syntax_error_in_a_final_expression_reports_its_own_column(sandbox: Sandbox) -> None:
    found = diagnostic(sandbox.run_sync("x = 1\n(yield 5)"), "SYNTAX_ERROR")
    assert (found["line"], found["column"]) == (2, 2), found


def test_a_final_expression_keeps_its_own_columns_as_cpython_does(sandbox: Sandbox) -> None:
    # Traceback marks (PEP 657) are drawn from these positions: the value's capture must not move them.
    code = (
        "import sys\ndef where():\n    frame = sys._getframe(1)\n"
        "    return list(frame.f_code.co_positions())[frame.f_lasti // 2][2:]\nwhere()"
    )
    assert data_of(sandbox.run_sync(code)) == [0, 7]


def test_a_final_expression_that_raises_reports_its_own_line(sandbox: Sandbox) -> None:
    found = diagnostic(sandbox.run_sync("x = 0\n1 / x  # divides"), "UNCAUGHT_EXCEPTION")
    assert found["frames"][-1] == {"line": 2, "function": "<module>", "text": "1 / x  # divides"}


def test_a_syntax_warning_is_printed_once(sandbox: Sandbox) -> None:
    # The runner tokenizes the code before compiling it: the tokenizer's warnings must not show twice.
    result = sandbox.run_sync("x = 1if 1 else 2\nx")
    assert data_of(result) == 1
    assert log_text(result).count("invalid decimal literal") == 1, log_text(result)


def test_the_runner_reads_its_options_as_json_loads_does(sandbox: Sandbox) -> None:
    # The runner reads the host's options with the JSON decoder's C scanner, json.loads as the fallback.
    given = ['{"max_result_bytes": 5}', "", "nonsense", '{"a": }', ' {"a": 1} ', '{"a": 1} x', "[1]", '{"a": [1e999]}']
    code = f"from codemode import _runner\nresult = [repr(_runner._options(s)) for s in {given!r}]"
    assert data_of(sandbox.run_sync(code)) == [
        "{'max_result_bytes': 5}", "{}", "{}", "{}", "{'a': 1}", "{}", "[1]", "{'a': [inf]}",
    ]  # fmt: skip


def test_an_uncaught_exception_reports_the_sandbox_frames(sandbox: Sandbox) -> None:
    code = "def inner():\n    return 1 / 0\n\ndef outer():\n    return inner()\n\nprint('before')\nouter()\n"
    result = sandbox.run_sync(code)
    assert error_of(result) == {"type": "ZeroDivisionError", "message": "division by zero", "retryable": False}
    found = diagnostic(result, "UNCAUGHT_EXCEPTION")
    assert [frame["function"] for frame in found["frames"]] == ["<module>", "outer", "inner"]
    assert found["frames"][-1] == {"line": 2, "function": "inner", "text": "return 1 / 0"}
    assert found["line"] == 2
    assert result["logs"][0]["message"] == "before"


@pytest.mark.parametrize("module", ["ctypes", "bz2", "lzma", "mmap", "readline"])
def test_a_module_that_cannot_exist_fails_with_an_import_failure_and_hint(sandbox: Sandbox, module: str) -> None:
    result = sandbox.run_sync(f"import {module}")
    assert error_of(result)["type"] == "ModuleNotFoundError"
    found = diagnostic(result, "IMPORT_FAILURE")
    assert module in found["message"]
    assert (found["hint"] and "sandbox" in found["hint"].lower()) or "build" in found["hint"]


def test_an_unknown_module_fails_with_an_import_failure(sandbox: Sandbox) -> None:
    found = diagnostic(sandbox.run_sync("import numpy"), "IMPORT_FAILURE")
    assert "numpy" in found["message"] and found["hint"]


STDLIB = (
    "json re datetime zoneinfo collections itertools functools math statistics decimal fractions random csv io "
    "textwrap string difflib dataclasses typing enum heapq bisect base64 hashlib uuid zlib gzip struct copy pprint "
    "html xml.etree.ElementTree urllib.parse ipaddress asyncio"
).split()


def test_the_useful_stdlib_is_importable(sandbox: Sandbox) -> None:
    code = f"import importlib\nresult = [importlib.import_module(m).__name__ for m in {STDLIB!r}]"
    assert data_of(sandbox.run_sync(code)) == STDLIB


def test_stdlib_modules_do_real_work(sandbox: Sandbox) -> None:
    code = """
import csv, io, statistics, zlib, gzip, hashlib, datetime, zoneinfo, decimal, re
rows = list(csv.reader(io.StringIO("a,b\\n1,2\\n3,4")))
packed = gzip.decompress(gzip.compress(b"x" * 1000))
result = {
    "rows": rows,
    "mean": statistics.mean([1, 2, 3, 4]),
    "zlib": zlib.decompress(zlib.compress(b"abc")).decode(),
    "gzip": len(packed),
    "sha": hashlib.sha256(b"abc").hexdigest()[:8],
    "tz": datetime.datetime(2024, 1, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")).utcoffset().seconds,
    "dec": str(decimal.Decimal("0.1") + decimal.Decimal("0.2")),
    "re": re.findall(r"\\d+", "a1b22c333"),
}
"""
    assert data_of(sandbox.run_sync(code)) == {
        "rows": [["a", "b"], ["1", "2"], ["3", "4"]],
        "mean": 2.5,
        "zlib": "abc",
        "gzip": 1000,
        "sha": "ba7816bf",
        "tz": 3600,
        "dec": "0.3",
        "re": ["1", "22", "333"],
    }


def test_non_json_values_fall_back_as_documented_with_a_warning(sandbox: Sandbox) -> None:
    code = "result = {'s': {3, 1, 2}, 't': (1, 2), 1: 'int key', 'o': object(), 'nan': float('nan')}"
    result = sandbox.run_sync(code)
    data = data_of(result)
    assert data["s"] == [1, 2, 3] and data["t"] == [1, 2] and data["1"] == "int key"
    assert data["o"].startswith("<object object") and data["nan"] == "nan"
    warnings = [d for d in result["diagnostics"] if d["code"] == "RESULT_NOT_JSON"]
    assert len(warnings) == 2 and all(d["severity"] == "warning" for d in warnings)


def test_a_circular_result_is_cut_not_crashed(sandbox: Sandbox) -> None:
    data = data_of(sandbox.run_sync("a = [1]\na.append(a)\nresult = a"))
    assert data == [1, "<circular reference>"]


def test_system_exit_zero_is_a_normal_end(sandbox: Sandbox) -> None:
    assert data_of(sandbox.run_sync("result = 5\nimport sys\nsys.exit(0)")) == 5
    assert error_of(sandbox.run_sync("raise SystemExit(3)"))["type"] == "SystemExit"


def test_the_result_is_json_serialisable_exactly(sandbox: Sandbox) -> None:
    result = sandbox.run_sync("result = 'é✓'")
    assert json.loads(json.dumps(result)) == result
    assert data_of(result) == "é✓"


def test_random_is_seeded_per_run(sandbox: Sandbox) -> None:
    code = "import random\nresult = [random.random() for _ in range(3)]"
    assert data_of(sandbox.run_sync(code)) != data_of(sandbox.run_sync(code))


def test_help_works_inside_the_sandbox(sandbox: Sandbox) -> None:
    result = sandbox.run_sync("def f(x: int) -> int:\n    'Doubles x.'\n    return 2 * x\nhelp(f)")
    data_of(result)
    text = log_text(result)
    assert "f(x: int) -> int" in text and "Doubles x." in text


def test_a_stdlib_module_left_out_of_the_build_says_so(sandbox: Sandbox) -> None:
    found = diagnostic(sandbox.run_sync("import lzma"), "IMPORT_FAILURE")
    assert "not part of the sandbox build" in found["hint"]
