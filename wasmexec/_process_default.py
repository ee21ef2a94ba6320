"""`process_default`: one process-wide value (a runtime, the run-directory pool), made on first use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def process_default(factory: Callable[[], T]) -> Callable[[], T]:
    """A getter of one process-wide value made by `factory` on its first call (thread-safe, made once)."""
    made: list[T] = []
    lock = threading.Lock()

    def get() -> T:
        if made:  # the common case takes no lock
            return made[0]
        with lock:
            if not made:
                made.append(factory())
            return made[0]

    return get
