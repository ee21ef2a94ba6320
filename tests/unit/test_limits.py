import pytest

from wasmexec import Limits
from wasmexec._limits import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_MS


def test_every_limit_but_fuel_is_on_by_default() -> None:
    limits = Limits()
    assert limits.timeout_ms == DEFAULT_TIMEOUT_MS == 30_000
    assert limits.memory_mb == DEFAULT_MEMORY_MB == 256
    assert limits.fuel is None  # the wall clock stops CPU-bound code; fuel is a budget an operator sets
    assert limits.max_stdout_bytes == 64 * 1024
    assert limits.max_stderr_bytes == 256 * 1024
    assert limits.max_result_bytes > 0
    assert limits.max_tool_calls == 200


def test_memory_bytes_is_memory_mb_in_bytes() -> None:
    assert Limits(memory_mb=3).memory_bytes == 3 * 1024 * 1024


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("timeout_ms", 0, ValueError),
        ("timeout_ms", -5, ValueError),
        ("timeout_ms", "30", TypeError),
        ("memory_mb", 5000, ValueError),
        ("fuel", 0, ValueError),
        ("max_stdout_bytes", -1, ValueError),
        ("max_tool_calls", True, TypeError),
        ("timeout_ms", 1.5, TypeError),
    ],
)
def test_an_out_of_range_or_mistyped_limit_is_refused_with_its_name(field: str, value: object, error: type) -> None:
    with pytest.raises(error, match=field):
        Limits(**{field: value})  # type: ignore[arg-type]


def test_fuel_none_turns_metering_off() -> None:
    assert Limits(fuel=None).fuel is None


def test_replace_validates_the_new_values() -> None:
    assert Limits().replace(timeout_ms=5).timeout_ms == 5
    with pytest.raises(ValueError, match="timeout_ms"):
        Limits().replace(timeout_ms=0)


def test_limits_are_immutable() -> None:
    with pytest.raises(AttributeError):
        Limits().timeout_ms = 1  # type: ignore[misc]
