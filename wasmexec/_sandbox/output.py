"""Captures the guest's stdout and stderr as log entries, with caps on their encoded size.

WASI delivers output as byte chunks on the thread running the guest. Complete lines
become entries stamped with the time since the run started; a line that arrives
within `COALESCE_MS` of the entry before it, from the same stream, joins that entry
(its message gains ``"\\n" + line``), so a flood of tiny writes costs bytes, not
entries.

Each stream's cap bounds what its entries cost on the output line: the JSON-escaped
message plus `ENTRY_OVERHEAD_BYTES` per entry, the first entry's overhead free (so a
cap of N always keeps N bytes of a first line). The whole ``logs`` array therefore
encodes to at most ``max_stdout_bytes + max_stderr_bytes + LOGS_OVERHEAD_BYTES``.
Bytes past a cap are counted and dropped, never buffered.

An `on_entry` callback hears each accepted piece (one or more complete lines, already
cut to the caps) as it is added, so a stream built from it never carries more than the
result's logs; it runs inside the WASI callback, so it must be quick, and an exception
it raises is swallowed there, never passed into wasmtime.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from wasmexec._envelope import LogEntry, LogLevel, encoded_size

#: An upper bound of one entry's bytes on the output line besides its escaped message:
#: ``{"level":"error","message":"","time_ms":`` (40), a float (at most 24 characters), ``},``.
ENTRY_OVERHEAD_BYTES = 66
#: Lines of one stream that arrive less than this after their entry's first line join it:
#: timestamps stay within a tenth of a second, and a flood costs bytes, not entries.
COALESCE_MS = 100.0
#: An upper bound of a "stream was cut" warning's message on the output line (the numbers
#: in it have at most 20 digits).
MAX_WARNING_BYTES = 128
#: What the ``logs`` array may take on the output line beyond the two caps: its brackets,
#: each stream's free first-entry overhead, and one warning entry per stream.
LOGS_OVERHEAD_BYTES = 2 + 2 * ENTRY_OVERHEAD_BYTES + 2 * (ENTRY_OVERHEAD_BYTES + MAX_WARNING_BYTES)

_NEWLINE_COST = 2  # "\n" on the output line


class StreamCapture:
    """One output stream (stdout or stderr) of one run."""

    def __init__(self, level: LogLevel, cap_bytes: int, output: OutputCapture) -> None:
        self.level: LogLevel = level
        self.cap_bytes = cap_bytes
        self.used = 0
        """Bytes on the output line charged to this stream so far."""
        self.dropped_bytes = 0
        self.full = False
        self._output = output
        self._pending: list[bytes] = []  # an unfinished line, in pieces (joining as they come is quadratic)
        self._pending_len = 0

    @property
    def room(self) -> int:
        """Bytes on the output line this stream may still add (its first entry's overhead is free)."""
        return self.cap_bytes + ENTRY_OVERHEAD_BYTES - self.used

    def write(self, chunk: bytes) -> None:
        """The WASI output callback: never raises (an exception here would cross into wasmtime)."""
        try:
            self._take(chunk)
        except BaseException:  # a bug here must not crash the run: keep what was captured, drop the rest
            self.full = True

    def close(self) -> None:
        """Flushes a last line that had no newline."""
        if self._pending and not self.full:
            self._emit(self._take_pending(b""), newline=0)

    def _take(self, chunk: bytes) -> None:
        if self.full:
            self.dropped_bytes += len(chunk)
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            self._pending.append(chunk)
            self._pending_len += len(chunk)
            if self._pending_len > self.room:  # cannot fit whatever follows: cut it now, buffer nothing more
                self._emit(self._take_pending(b""), newline=0)
            return
        self._emit(self._take_pending(chunk[:end]), newline=1)
        if end + 1 < len(chunk):
            self._take(chunk[end + 1 :])

    def _take_pending(self, tail: bytes) -> bytes:
        lines = b"".join([*self._pending, tail])
        self._pending, self._pending_len = [], 0
        return lines

    def _emit(self, raw: bytes, newline: int) -> None:
        """Adds complete lines (`raw`, joined by newlines) to the log, cut to the room left."""
        text = raw.decode("utf-8", errors="replace")
        now = self._output.now_ms()
        join = self._output.joinable(self, now)
        fixed = _NEWLINE_COST if join else ENTRY_OVERHEAD_BYTES
        escaped = encoded_size(text) - 2  # without the quotes
        if fixed + escaped > self.room:
            text = _fit(text, self.room - fixed)
            self.full = True
            kept = min(len(raw), len(text.encode("utf-8")))
            self.dropped_bytes += len(raw) - kept + newline
            if not text:
                return
            escaped = encoded_size(text) - 2
        self.used += fixed + escaped
        self._output.add(self, text, now, join)


def _fit(text: str, budget: int) -> str:
    """The longest prefix of `text` whose escaped form takes at most `budget` bytes."""
    low, high = 0, max(0, min(len(text), budget))  # every character takes at least one byte
    while low < high:
        middle = (low + high + 1) // 2
        if encoded_size(text[:middle]) - 2 <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]


class OutputCapture:
    """stdout (level ``log``) and stderr (level ``error``) of one run, in one ordered list."""

    def __init__(
        self,
        max_stdout_bytes: int,
        max_stderr_bytes: int,
        started: float,
        clock: Callable[[], float] = time.monotonic,
        on_entry: Callable[[LogLevel, str], None] | None = None,
    ) -> None:
        self.entries: list[LogEntry] = []
        self._on_entry = on_entry
        self._started = started
        self._clock = clock
        self._open: StreamCapture | None = None  # whose entry is last and may still grow
        self._open_parts: list[str] = []
        self._open_ms = 0.0
        self.stdout = StreamCapture("log", max_stdout_bytes, self)
        self.stderr = StreamCapture("error", max_stderr_bytes, self)

    def now_ms(self) -> float:
        """Milliseconds since the run started."""
        return round((self._clock() - self._started) * 1000, 3)

    def joinable(self, stream: StreamCapture, now_ms: float) -> bool:
        """Whether a line of `stream` arriving now joins the last entry."""
        return self._open is stream and now_ms - self._open_ms <= COALESCE_MS

    def add(self, stream: StreamCapture, text: str, now_ms: float, join: bool) -> None:
        """Appends lines to the last entry (`join`) or starts a new entry with them."""
        self._tell(stream.level, text)
        if join:
            self._open_parts.append(text)
            return
        self._close_open()
        self.entries.append({"level": stream.level, "message": text, "time_ms": now_ms})
        self._open, self._open_parts, self._open_ms = stream, [text], now_ms

    def _tell(self, level: LogLevel, text: str) -> None:
        if self._on_entry is None:
            return
        try:
            self._on_entry(level, text)
        except Exception:  # a listener's bug must not cost the run its output (nor cross into wasmtime)
            pass

    def _close_open(self) -> None:
        if self._open is not None and len(self._open_parts) > 1:
            self.entries[-1]["message"] = "\n".join(self._open_parts)
        self._open, self._open_parts = None, []

    def finish(self) -> list[LogEntry]:
        """Closes both streams and adds a final ``warn`` entry per stream that was cut."""
        for stream in (self.stdout, self.stderr):
            stream.close()
        self._close_open()
        for stream, name in ((self.stdout, "stdout"), (self.stderr, "stderr")):
            if stream.dropped_bytes:
                self.entries.append(
                    {
                        "level": "warn",
                        "message": f"{name} was cut: {stream.dropped_bytes} bytes over the "
                        f"{stream.cap_bytes}-byte limit were dropped",
                        "time_ms": self.now_ms(),
                    }
                )
        return self.entries

    @property
    def truncated(self) -> bool:
        return bool(self.stdout.dropped_bytes or self.stderr.dropped_bytes)
