"""Captures the guest's stdout and stderr as log entries, with byte caps.

WASI delivers output as byte chunks on the thread running the guest; each complete
line becomes one entry stamped with the time since the run started. Bytes past a
stream's cap are counted and dropped, never buffered.
"""

from __future__ import annotations

import time

from wasmexec._envelope import LogEntry, LogLevel


class StreamCapture:
    """One output stream (stdout or stderr) of one run."""

    def __init__(self, level: LogLevel, cap_bytes: int, started: float, entries: list[LogEntry]) -> None:
        self.level: LogLevel = level
        self.cap_bytes = cap_bytes
        self.kept_bytes = 0
        self.dropped_bytes = 0
        self._started = started
        self._entries = entries
        self._partial = b""

    def write(self, chunk: bytes) -> None:
        """The WASI output callback: never raises (an exception here would trap the guest)."""
        room = self.cap_bytes - self.kept_bytes
        if room <= 0:
            self.dropped_bytes += len(chunk)
            return
        if len(chunk) > room:
            self.dropped_bytes += len(chunk) - room
            chunk = chunk[:room]
        self.kept_bytes += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            self._emit(line)  # one entry per line, however long: splitting could cut a secret in two

    def close(self) -> None:
        """Flushes a last line that had no newline."""
        if self._partial:
            self._emit(self._partial)
            self._partial = b""

    def _emit(self, line: bytes) -> None:
        self._entries.append(
            {
                "level": self.level,
                "message": line.decode("utf-8", errors="replace"),
                "time_ms": round((time.monotonic() - self._started) * 1000, 3),
            }
        )


class OutputCapture:
    """stdout (level ``log``) and stderr (level ``error``) of one run, in one ordered list."""

    def __init__(self, max_stdout_bytes: int, max_stderr_bytes: int, started: float) -> None:
        self.entries: list[LogEntry] = []
        self.stdout = StreamCapture("log", max_stdout_bytes, started, self.entries)
        self.stderr = StreamCapture("error", max_stderr_bytes, started, self.entries)
        self._started = started

    def finish(self) -> list[LogEntry]:
        """Closes both streams and adds a final ``warn`` entry per stream that was cut."""
        for stream, name in ((self.stdout, "stdout"), (self.stderr, "stderr")):
            stream.close()
            if stream.dropped_bytes:
                self.entries.append(
                    {
                        "level": "warn",
                        "message": f"{name} was cut: {stream.dropped_bytes} bytes over the "
                        f"{stream.cap_bytes}-byte limit were dropped",
                        "time_ms": round((time.monotonic() - self._started) * 1000, 3),
                    }
                )
        return self.entries

    @property
    def truncated(self) -> bool:
        return bool(self.stdout.dropped_bytes or self.stderr.dropped_bytes)
