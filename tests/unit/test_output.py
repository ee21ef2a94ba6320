from __future__ import annotations

from wasmexec._envelope import LogEntry, encoded_size
from wasmexec._sandbox.output import COALESCE_MS, ENTRY_OVERHEAD_BYTES, LOGS_OVERHEAD_BYTES, OutputCapture


class FakeClock:
    """Seconds that only move when a test moves them."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000


def capture(stdout_cap: int = 100, stderr_cap: int = 100, clock: FakeClock | None = None) -> OutputCapture:
    clock = clock or FakeClock()
    return OutputCapture(stdout_cap, stderr_cap, clock(), clock=clock)


def level_size(entries: list[LogEntry], level: str) -> int:
    """Bytes of one stream's entries on the output line."""
    return encoded_size([entry for entry in entries if entry["level"] == level])


def test_lines_of_one_stream_become_entries_in_arrival_order() -> None:
    out = capture()
    out.stdout.write(b"one\ntw")
    out.stderr.write(b"err\n")
    out.stdout.write(b"o\n")
    entries = out.finish()
    assert [(e["level"], e["message"]) for e in entries] == [("log", "one"), ("error", "err"), ("log", "two")]
    assert all(e["time_ms"] >= 0 for e in entries)


def test_lines_within_the_coalescing_window_share_an_entry_and_later_ones_start_a_new_one() -> None:
    clock = FakeClock()
    out = capture(clock=clock)
    out.stdout.write(b"a\n")
    clock.advance_ms(COALESCE_MS / 2)
    out.stdout.write(b"b\n\nc\n")
    clock.advance_ms(COALESCE_MS)
    out.stdout.write(b"d\n")
    entries = out.finish()
    assert [e["message"] for e in entries] == ["a\nb\n\nc", "d"]
    assert entries[1]["time_ms"] > entries[0]["time_ms"]


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


def test_a_small_cap_still_keeps_that_many_bytes_of_the_first_line() -> None:
    out = capture(stdout_cap=5)
    out.stdout.write(b"0123456789\n")
    assert out.finish()[0]["message"] == "01234"


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


def test_a_line_written_in_many_pieces_is_cut_at_the_cap_without_buffering_the_rest() -> None:
    out = capture(stdout_cap=1_000)
    for _ in range(10_000):
        out.stdout.write(b"y" * 1_000)
    assert out.stdout.dropped_bytes >= 10_000 * 1_000 - 1_000
    entries = out.finish()
    assert entries[0]["message"] == "y" * 1_000


def test_empty_lines_cost_their_escaped_newline_not_an_entry_each() -> None:
    out = capture(stdout_cap=64 * 1024, stderr_cap=256 * 1024)
    out.stdout.write(b"\n" * 65_536)
    out.stderr.write(b"\n" * 262_144)
    entries = out.finish()
    assert len(entries) <= 4  # one entry per stream, and a warning each for what did not fit
    assert encoded_size(entries) <= 64 * 1024 + 256 * 1024 + LOGS_OVERHEAD_BYTES


def test_the_cap_bounds_escaped_bytes_not_raw_bytes() -> None:
    out = capture(stdout_cap=600, stderr_cap=600)
    out.stdout.write(b"\x01" * 1_000 + b"\n")  # each byte is 6 bytes escaped (\u0001)
    out.stderr.write("\u2028".encode() * 1_000 + b"\n")  # 3 bytes raw, 6 escaped on the output line
    entries = out.finish()
    assert level_size(entries, "log") <= 600 + ENTRY_OVERHEAD_BYTES
    assert level_size(entries, "error") <= 600 + ENTRY_OVERHEAD_BYTES
    assert entries[0]["message"] == "\x01" * 100 and entries[1]["message"] == "\u2028" * 100


def test_alternating_streams_cannot_multiply_the_entry_overhead() -> None:
    out = capture(stdout_cap=1_000, stderr_cap=1_000)
    for _ in range(10_000):
        out.stdout.write(b"\n")
        out.stderr.write(b"\n")
    entries = out.finish()
    assert level_size(entries, "log") <= 1_000 + ENTRY_OVERHEAD_BYTES
    assert level_size(entries, "error") <= 1_000 + ENTRY_OVERHEAD_BYTES
    assert encoded_size(entries) <= 2_000 + LOGS_OVERHEAD_BYTES


def test_a_cut_never_splits_a_character() -> None:
    out = capture(stdout_cap=10)
    out.stdout.write("ééééééé\n".encode())  # 2 bytes each
    message = out.finish()[0]["message"]
    assert message == "ééééé"


def test_the_entry_overhead_bounds_any_entry_besides_its_message() -> None:
    entry = {"level": "error", "message": "", "time_ms": -1.7976931348623157e308}
    assert encoded_size(entry) + len(",") <= ENTRY_OVERHEAD_BYTES  # the empty message's quotes included


def test_the_warnings_fit_the_documented_overhead() -> None:
    out = capture(stdout_cap=2**40, stderr_cap=2**40)
    out.stdout.dropped_bytes = out.stderr.dropped_bytes = 2**64
    entries = out.finish()
    assert len(entries) == 2 and encoded_size(entries) <= LOGS_OVERHEAD_BYTES


def test_the_output_callback_hears_every_accepted_piece_and_never_more_than_the_caps() -> None:
    heard: list[tuple[str, str]] = []
    clock = FakeClock()
    out = OutputCapture(10, 100, clock(), clock=clock, on_entry=lambda level, text: heard.append((level, text)))
    out.stdout.write(b"hello\n")
    out.stderr.write(b"oops\n")
    out.stdout.write(b"x" * 1000 + b"\n")
    entries = out.finish()
    assert heard[:2] == [("log", "hello"), ("error", "oops")]
    streamed = "".join(text for level, text in heard if level == "log")
    logged = "".join(entry["message"].replace("\n", "") for entry in entries if entry["level"] == "log")
    assert streamed == logged  # the stream carries what the logs keep, cut at the same place


def test_an_output_callback_that_raises_costs_the_run_nothing() -> None:
    def broken(level: str, text: str) -> None:
        raise RuntimeError("listener bug")

    clock = FakeClock()
    out = OutputCapture(100, 100, clock(), clock=clock, on_entry=broken)
    out.stdout.write(b"one\n")
    clock.advance_ms(COALESCE_MS * 2)
    out.stdout.write(b"two\n")
    assert [entry["message"] for entry in out.finish()] == ["one", "two"]
