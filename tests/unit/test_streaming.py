from __future__ import annotations

import io
import threading

from wasmexec._redact import MARKER, Redactor
from wasmexec._server.streaming import MAX_MESSAGES_PER_SECOND, STREAM_INTERVAL_S, OutputStream, printed


def test_waiting_output_leaves_as_one_redacted_message_per_stream() -> None:
    stream = OutputStream(Redactor(["hunter2-secret"]))
    stream.feed("log", "one")
    stream.feed("error", "bad")
    stream.feed("log", "two hunter2-secret")
    assert stream.take() == [("log", f"one\ntwo {MARKER}"), ("error", "bad")]
    assert stream.take() == []


def test_the_message_rate_is_bounded_by_the_interval() -> None:
    assert MAX_MESSAGES_PER_SECOND * STREAM_INTERVAL_S <= 2


def test_feeding_from_many_threads_loses_nothing() -> None:
    stream = OutputStream(Redactor())

    def feed(n: int) -> None:
        for i in range(200):
            stream.feed("log", f"{n}-{i}")

    threads = [threading.Thread(target=feed, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [(level, text)] = stream.take()
    assert level == "log" and len(text.split("\n")) == 800


def test_the_printer_prints_what_is_left_when_it_stops() -> None:
    out = io.StringIO()
    stream = OutputStream(Redactor())
    with printed(stream, out):
        stream.feed("log", "last words")
    assert out.getvalue() == "last words\n"
