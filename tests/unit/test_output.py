import time

from wasmexec._sandbox.output import OutputCapture


def capture(stdout_cap: int = 100, stderr_cap: int = 100) -> OutputCapture:
    return OutputCapture(stdout_cap, stderr_cap, time.monotonic())


def test_each_complete_line_becomes_one_entry_in_arrival_order() -> None:
    out = capture()
    out.stdout.write(b"one\ntw")
    out.stderr.write(b"err\n")
    out.stdout.write(b"o\n")
    entries = out.finish()
    assert [(e["level"], e["message"]) for e in entries] == [("log", "one"), ("error", "err"), ("log", "two")]
    assert all(e["time_ms"] >= 0 for e in entries)


def test_a_last_line_without_newline_is_kept() -> None:
    out = capture()
    out.stdout.write(b"tail")
    assert [e["message"] for e in out.finish()] == ["tail"]


def test_bytes_over_the_cap_are_dropped_and_a_warning_says_how_many() -> None:
    out = capture(stdout_cap=10)
    out.stdout.write(b"0123456789ABCDEF\n")
    out.stdout.write(b"more\n")
    entries = out.finish()
    assert entries[0] == {"level": "log", "message": "0123456789", "time_ms": entries[0]["time_ms"]}
    assert entries[-1]["level"] == "warn"
    assert "stdout" in entries[-1]["message"] and "12 bytes" in entries[-1]["message"]
    assert out.truncated


def test_invalid_utf8_is_replaced_not_raised() -> None:
    out = capture()
    out.stdout.write(b"\xff\xfe ok\n")
    assert out.finish()[0]["message"].endswith(" ok")


def test_a_giant_line_stays_one_entry_up_to_the_cap() -> None:
    out = capture(stdout_cap=40_000)
    out.stdout.write(b"x" * 50_000)
    entries = out.finish()
    assert len(entries[0]["message"]) == 40_000
    assert entries[-1]["level"] == "warn"
