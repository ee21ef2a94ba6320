"""Output floods: stdout and stderr are capped, and what was cut is reported."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import data_of, diagnostic, log_text, python_allocations
from tests.security._support import assert_host_survives, run, timed_run
from wasmexec import Runtime
from wasmexec._envelope import encoded_size, result_json
from wasmexec._limits import DEFAULT_MAX_STDERR_BYTES, DEFAULT_MAX_STDOUT_BYTES
from wasmexec._sandbox.output import ENTRY_OVERHEAD_BYTES, LOGS_OVERHEAD_BYTES

PROMPT_S = 5.0


def _kept_bytes(result: dict[str, Any], level: str) -> int:
    """Bytes of the messages kept at `level` (newlines, which the cap also counts, excluded)."""
    return sum(len(entry["message"].encode()) for entry in result["logs"] if entry["level"] == level)


def _warnings(result: dict[str, Any]) -> list[str]:
    return [entry["message"] for entry in result["logs"] if entry["level"] == "warn"]


def test_a_print_flood_is_capped_and_the_cut_is_reported(runtime: Runtime) -> None:
    code = "for i in range(3000):\n    print('flood line', i)\nresult = 'done'"
    result, elapsed = timed_run(runtime, code, max_stdout_bytes=1000)
    assert data_of(result) == "done"
    assert _kept_bytes(result, "log") <= 1000
    assert result["logs"][0]["message"].startswith("flood line 0\n")
    warnings = _warnings(result)
    assert len(warnings) == 1
    assert result["logs"][-1]["level"] == "warn"
    assert "stdout" in warnings[0] and "1000" in warnings[0] and "dropped" in warnings[0]
    assert diagnostic(result, "LOGS_TRUNCATED")["severity"] == "warning"
    assert elapsed < PROMPT_S
    assert_host_survives(runtime)


def test_a_single_huge_line_is_capped_and_the_cut_is_reported(runtime: Runtime) -> None:
    result = run(runtime, "print('x' * 10_000_000)\nresult = 'done'", max_stdout_bytes=1000)
    assert data_of(result) == "done"
    assert _kept_bytes(result, "log") <= 1000
    assert any("stdout" in warning for warning in _warnings(result))
    diagnostic(result, "LOGS_TRUNCATED")
    assert_host_survives(runtime)


def test_a_stderr_flood_is_capped_and_the_cut_is_reported(runtime: Runtime) -> None:
    code = "import sys\nfor i in range(3000):\n    sys.stderr.write(f'error line {i}\\n')\nresult = 'done'"
    result, elapsed = timed_run(runtime, code, max_stderr_bytes=1000)
    assert data_of(result) == "done"
    assert _kept_bytes(result, "error") <= 1000
    assert any("stderr" in warning for warning in _warnings(result))
    diagnostic(result, "LOGS_TRUNCATED")
    assert elapsed < PROMPT_S


def test_output_written_straight_to_the_file_descriptors_is_capped_too(runtime: Runtime) -> None:
    code = "import os\nfor _ in range(2000):\n    os.write(1, b'a' * 100)\n    os.write(2, b'b' * 100)"
    result = run(runtime, code, max_stdout_bytes=500, max_stderr_bytes=500)
    assert len(log_text(result, "log")) <= 500
    assert len(log_text(result, "error")) <= 500
    assert len(_warnings(result)) == 2
    diagnostic(result, "LOGS_TRUNCATED")


def test_a_zero_byte_cap_keeps_no_output_but_says_so(runtime: Runtime) -> None:
    result = run(runtime, "print('secret plan')\nresult = 1", max_stdout_bytes=0)
    assert data_of(result) == 1
    assert "secret plan" not in log_text(result)
    assert len(_warnings(result)) == 1
    diagnostic(result, "LOGS_TRUNCATED")


def test_a_long_line_under_the_cap_arrives_as_one_entry(runtime: Runtime) -> None:
    code = "import sys\nfor _ in range(10):\n    sys.stdout.write('y' * 4000)\nsys.stdout.write('\\n')"
    result = run(runtime, code)
    entries = [entry["message"] for entry in result["logs"] if entry["level"] == "log"]
    assert entries == ["y" * 40_000]  # one line, one entry: a secret in it is never cut in two


def test_replacing_sys_stdout_inside_does_not_break_the_run_or_the_next_one(runtime: Runtime) -> None:
    code = "import io, sys\nsys.stdout = io.StringIO()\nsys.stderr = None\nprint('hidden')\nresult = 'ok'"
    assert data_of(run(runtime, code)) == "ok"
    assert data_of(run(runtime, "import sys\nsys.stdout.close()\nresult = 'closed'")) == "closed"
    result = run(runtime, "print('visible')")
    assert log_text(result) == "visible"


def test_a_long_print_under_the_cap_arrives_whole(runtime: Runtime) -> None:
    result = run(runtime, "print('x' * 20_000)")
    assert len(log_text(result, "log").replace("\n", "")) == 20_000


def test_a_single_huge_line_under_the_default_cap_is_reported_as_cut(runtime: Runtime) -> None:
    result = run(runtime, "print('x' * 10_000_000)")
    diagnostic(result, "LOGS_TRUNCATED")


# -- the caps bound the encoded output line ------------------------------------------------------------

#: The run result besides its logs (ids, digests, metrics, the LOGS_TRUNCATED diagnostic) stays under this.
ENVELOPE_BYTES = 4096
#: Host memory a flood may cost per byte of the caps (entries, the pieces of a line, the result and its line).
MEMORY_PER_CAP_BYTE = 8
MEMORY_SLACK = 16 * 1024 * 1024

NEWLINE_FLOOD = "import sys\nsys.stdout.write('\\n' * {stdout})\nsys.stderr.write('\\n' * {stderr})\nresult = 'done'"


@pytest.mark.parametrize(
    ("caps", "newlines"),
    [
        ((DEFAULT_MAX_STDOUT_BYTES, DEFAULT_MAX_STDERR_BYTES), (65_536, 262_144)),
        ((4_000_000, 4_000_000), (65_536, 262_144)),
        ((4_000_000, 4_000_000), (4_000_000, 4_000_000)),
    ],
    ids=["default-caps", "4MB-caps", "4MB-caps-cap-sized-flood"],
)
def test_a_newline_flood_encodes_to_at_most_the_caps_plus_a_fixed_overhead(
    runtime: Runtime, caps: tuple[int, int], newlines: tuple[int, int]
) -> None:
    code = NEWLINE_FLOOD.format(stdout=newlines[0], stderr=newlines[1])
    with python_allocations() as allocated:
        result = run(runtime, code, timeout_ms=120_000, max_stdout_bytes=caps[0], max_stderr_bytes=caps[1])
        line = result_json(result)
        peak = allocated()
    assert data_of(result) == "done"
    assert encoded_size(result["logs"]) <= caps[0] + caps[1] + LOGS_OVERHEAD_BYTES
    assert len(line.encode()) <= caps[0] + caps[1] + LOGS_OVERHEAD_BYTES + ENVELOPE_BYTES
    assert peak <= MEMORY_PER_CAP_BYTE * (caps[0] + caps[1]) + MEMORY_SLACK
    kept = sum(entry["message"].count("\n") + 1 for entry in result["logs"] if entry["level"] != "warn")
    assert kept >= 0.9 * min(sum(newlines), (caps[0] + caps[1]) // 2)  # the caps keep output, not overhead


def test_alternating_stdout_and_stderr_writes_stay_within_the_caps(runtime: Runtime) -> None:
    code = "import os\nfor _ in range(50_000):\n    os.write(1, b'\\n')\n    os.write(2, b'\\n')"
    result = run(runtime, code, timeout_ms=120_000, max_stdout_bytes=10_000, max_stderr_bytes=10_000)
    assert encoded_size(result["logs"]) <= 20_000 + LOGS_OVERHEAD_BYTES
    diagnostic(result, "LOGS_TRUNCATED")


def test_control_characters_count_escaped_against_the_cap(runtime: Runtime) -> None:
    result = run(runtime, "print('\\x01' * 100_000)", max_stdout_bytes=6_000)
    assert encoded_size([entry for entry in result["logs"] if entry["level"] == "log"]) <= 6_000 + ENTRY_OVERHEAD_BYTES
    diagnostic(result, "LOGS_TRUNCATED")
