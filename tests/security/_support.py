"""Helpers for the break-out tests: run code with chosen limits, time it, check the host survived."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from tests.helpers import data_of
from wasmexec import Limits, Runtime, Sandbox

#: Removes any import hook codemode might add (there was once an import blocker; since issue 17 nothing
#: is refused at import), so tests show that the layer underneath (WASI with an empty context) holds.
UNBLOCK_IMPORTS = (
    "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__.partition('.')[0] != 'codemode']\n"
)

#: The raw host interface, as an attacker reaches it (bypassing codemode's checks): the WIT bindings in
#: the default image, the door's encoding of the same functions in the science image (`codemode._door`).
RAW_HOST = "from codemode._host import _wit as host, Err\n"

#: Exception types a failed import may surface as.
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "SandboxImportError"}


def profile_of(runtime: Any) -> str:
    """The guest image a runtime runs: "default" or "science"."""
    return str(getattr(runtime, "profile", "default"))


def forge_report(report_text: str) -> str:
    """Guest code that makes the bridge send `report_text` instead of its real report (through the
    runner's report encoding: agent code can replace it, as it can anything in its own interpreter)."""
    return f"from codemode import _runner\n_runner._encode_report = lambda report: {report_text!r}\nresult = 1\n"


def run(runtime: Runtime, code: str, **limits: Any) -> dict[str, Any]:
    """Runs `code` in a fresh sandbox (10 s timeout unless given) and returns the run result."""
    limits.setdefault("timeout_ms", 10_000)
    result = Sandbox(Limits(**limits), runtime=runtime).run_sync(code)
    return dict(result)


def timed_run(runtime: Runtime, code: str, **limits: Any) -> tuple[dict[str, Any], float]:
    """Like `run`, and also returns the wall time the host spent in seconds."""
    started = time.monotonic()
    result = run(runtime, code, **limits)
    return result, time.monotonic() - started


def attempts_code(attempts: dict[str, str], prelude: str = "") -> str:
    """Guest code that runs each statement (a name → statement dict) and returns, per name, "done" or
    the type name of the exception it raised."""
    body = "".join(
        f"try:\n    {statement.replace(chr(10), chr(10) + '    ')}\n    outcome[{name!r}] = 'done'\n"
        "except BaseException as exc:\n"
        f"    outcome[{name!r}] = type(exc).__name__\n"
        for name, statement in attempts.items()
    )
    return prelude + "outcome = {}\n" + body + "result = outcome\n"


def assert_host_survives(runtime: Runtime) -> None:
    """A fresh run on the same runtime still works and sees a pristine interpreter."""
    check = "import builtins, os, sys\nresult = [1 + 1, hasattr(builtins, 'x'), dict(os.environ)]"
    assert data_of(run(runtime, check)) == [2, False, {}]


_ONLY = "_security_profile_only"
F = TypeVar("F", bound=Callable[..., Any])


def default_only(why: str) -> Callable[[F], F]:
    """Runs a test on the default image only; `why` says how the science image is covered instead."""
    return _only("default", why)


def science_only(why: str) -> Callable[[F], F]:
    """Runs a test on the science image only; `why` says what of that image it attacks."""
    return _only("science", why)


def _only(profile: str, why: str) -> Callable[[F], F]:
    def mark(test: F) -> F:
        setattr(test, _ONLY, (profile, why))
        return test

    return mark


def only_for(item: Any, profile: str) -> str | None:
    """Why `item` (a collected test) does not run on `profile`, or None when it does.

    A test says so with `default_only`/`science_only`; a whole module with a ``PROFILE_ONLY =
    (profile, why)`` global."""
    only = getattr(getattr(item, "function", None), _ONLY, None) or getattr(item.module, "PROFILE_ONLY", None)
    if only is None or only[0] == profile:
        return None
    return f"{only[0]} profile only: {only[1]}"
