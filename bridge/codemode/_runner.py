"""Runs one piece of agent code and reports what happened, as JSON for the host.

The report is the guest's half of the run result: ``ok``, ``data_json`` (the result
value), ``error`` and ``diagnostics``. Logs, limits and metrics are the host's half.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import collections
import inspect
import json
import linecache
import random
import sys
import traceback
import types
from typing import Any

from codemode import _files, _jsonable, _loop, _stdlib, _trailing, errors
from codemode._restrict import hint_for

FILENAME = "<sandbox>"
_LAST_VALUE = "__codemode_last_value__"
_MAX_FRAMES = 5
_DEFAULT_MAX_RESULT_BYTES = 1 << 20
#: The report's encoders, made once (in the snapshot): `json.dumps` with arguments builds a new one per call.
_REPORT_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ASCII_REPORT_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))
#: A report with a value and nothing else (`_report` puts its keys in this order).
_PLAIN_REPORT = '{{"ok":true,"diagnostics":[],"data_json":{}}}'
_encode_string = json.encoder.encode_basestring
_SCAN_JSON = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by __init__, not in the stubs
#: The fixed dummy a spare runs before any user code (`prepare`): no output, no clock, no host call.
_WARM_CODE = "values = [n * 2 for n in range(8)]\nresult = {'sum': sum(values)}"
_WARM_OPTIONS = '{"max_result_bytes": 4096}'
#: The same, ending with an expression: the build's warm-up also takes the path of a trailing expression.
_WARM_EXPRESSION_CODE = "values = [n * 2 for n in range(8)]\n{'sum': sum(values)}"

_HINTS = {
    "SYNTAX_ERROR": "Fix the syntax at the line shown; the code must be a Python 3.14 module.",
    "UNCAUGHT_EXCEPTION": "Handle the exception or fix the code at the last frame shown.",
    "IMPORT_FAILURE": "Only the standard library, codemode and servers.* exist in the sandbox; "
    "third-party packages cannot be installed.",
    "STDLIB_NOT_BUILT": "This standard-library module is not part of the sandbox build.",
    "SCIENCE": "{name} is in the science image, not this one: run with --profile science "
    '(run_python\'s profile argument: profile="science"; Sandbox(profile="science")).',
    "RECURSION": "Recursion went too deep: use a loop or an explicit stack.",
    "MEMORY": "The run hit its memory limit: process less data at a time or ask for a higher memory_mb.",
    "RESULT_NOT_JSON": "Return only JSON values (dict, list, str, int, float, bool, None).",
    "RESULT_TOO_LARGE": "Return a smaller result: aggregate, filter or truncate before returning.",
}


def run_to_json(code: str, options_json: str, *, reseed: bool = True) -> str:
    """The `run` export: never raises, always returns a JSON report.

    `reseed`: seed `random` from the OS first, so that no run replays the snapshot's sequence. The
    default image passes False: componentize-py already seeds it on each instance's first export
    call (a spare's warm-up or the run itself), and a second seed costs a tenth of an empty run.
    """
    options = _options(options_json)
    try:
        report = _Run(code, options, reseed).execute()
    except BaseException as exc:
        report = {
            "ok": False,
            "diagnostics": [],
            "error": {
                "type": "SandboxError",
                "retryable": False,
                "message": f"the run's outcome could not be reported ({type(exc).__name__} while reporting)",
            },
        }
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    text = _encode_report(report)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (result = "\ud800") cannot cross the WIT string: escape all
        text = _ASCII_REPORT_ENCODER.encode(report)
    return text


def _encode_report(report: dict[str, Any]) -> str:
    """The report as JSON text; the usual one (a value, nothing to diagnose) written directly, in a seventh of
    the instructions `_REPORT_ENCODER` takes, and the same text."""
    if len(report) == 3 and not report["diagnostics"] and type(report.get("data_json")) is str:
        return _PLAIN_REPORT.format(_encode_string(report["data_json"]))
    return _REPORT_ENCODER.encode(report)


def _options(options_json: str) -> Any:
    """The run's options, as the host's `json.dumps` wrote them; {} if they do not parse.

    The decoder's C scanner straight away: `json.loads` first matches whitespace with regexes, which
    costs 16 k of the 26 k instructions it takes for the usual one-key object.
    """
    try:
        value, end = _SCAN_JSON(options_json, 0)
        if end == len(options_json):
            return value
    except (StopIteration, ValueError, RecursionError):  # the scanner's "no value here" is a StopIteration
        pass
    try:
        return json.loads(options_json or "{}")
    except ValueError:
        return {}


def prepare(*, reseed: bool = True) -> bool:
    """The `prepare` export: runs `_WARM_CODE` through the same path as a run, then drops its traces.

    A spare instance (made ahead of time, used by one run, then dropped) calls it before any user
    code: the run then finds the interpreter's pages and caches that a run touches already warm.
    What it leaves is what a fresh instance would show a run: the report is dropped, the code's
    line cache entry removed, its namespace gone; the random generator is re-seeded by the run
    (`run_to_json`). The default image also runs it once at build time, so that what the first run
    of any instance would set up lazily (compiler, encoder, caches) is in the snapshot already.
    Returns whether the dummy ran as it should (the host discards the instance otherwise).
    """
    try:
        report = json.loads(run_to_json(_WARM_CODE, _WARM_OPTIONS, reseed=reseed))
        ok = report.get("ok") is True and report.get("data_json") == '{"sum":56}'
    except BaseException:
        ok = False
    linecache.cache.pop(FILENAME, None)
    return ok


def warm_image(rounds: int) -> bool:
    """Build time only, before the snapshot: `prepare`'s dummy and its trailing-expression twin, `rounds`
    times each, so that what any run sets up on first use (the compiler's, the encoders' and the AST's
    lazy state, caches, the interpreter's specialised instructions) is in the image instead of being redone
    by every instance. No user code has run yet. Returns whether every round ran as it should.
    """
    ok = True
    for _ in range(rounds):
        ok = prepare(reseed=False) and ok
        try:
            report = json.loads(run_to_json(_WARM_EXPRESSION_CODE, _WARM_OPTIONS, reseed=False))
            ok = ok and report.get("data_json") == '{"sum":56}'
        finally:
            linecache.cache.pop(FILENAME, None)
    return ok


def _safe_str(value: object) -> str:
    """str() that survives objects whose __str__ raises or recurses."""
    try:
        return str(value)
    except BaseException:
        return f"<unprintable {type(value).__name__}>"


def _sandbox_frames(tb: Any) -> list[dict[str, Any]]:
    """The last frames of the traceback that are in the sandboxed code (walks lazily: a
    RecursionError can carry a million frames)."""
    last: collections.deque[dict[str, Any]] = collections.deque(maxlen=_MAX_FRAMES)
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == FILENAME:
            last.append({"line": lineno, "function": frame.f_code.co_name, "text": ""})
    lines = linecache.getlines(FILENAME)
    for entry in last:
        if 0 < entry["line"] <= len(lines):
            entry["text"] = lines[entry["line"] - 1].strip()
    return list(last)


#: Import names of the science image's packages: importing one elsewhere gets a hint naming that image.
_SCIENCE_PACKAGES = frozenset({
    "numpy", "pandas", "scipy", "matplotlib", "sklearn", "statsmodels", "seaborn", "sympy", "networkx",
    "PIL", "patsy", "mpmath", "dateutil", "pytz", "joblib", "threadpoolctl", "contourpy", "cycler",
    "kiwisolver", "fontTools", "pyparsing", "packaging", "tqdm", "reportlab",
})  # fmt: skip


def _import_hint(name: str | None) -> str:
    top = (name or "").partition(".")[0]
    reason = _stdlib.reason(name)
    if reason is not None:
        return f"{_HINTS['STDLIB_NOT_BUILT']} {top}: {reason}."
    if top in sys.stdlib_module_names:
        return _HINTS["STDLIB_NOT_BUILT"]
    if top in _SCIENCE_PACKAGES:
        return _HINTS["SCIENCE"].format(name=top)
    return _HINTS["IMPORT_FAILURE"]


def _wall_hint(exc: BaseException) -> str | None:
    """The hint for an error raised inside a module that meets a wall of the sandbox (a socket, a process)."""
    found = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        hint = hint_for(frame.f_globals.get("__name__"))
        found = hint or found
    return found


def _fresh_main() -> types.ModuleType:
    """A new `__main__` module for the run's code: its globals are the module's, as in ``python script.py``.

    pickle finds classes the code defines through ``sys.modules['__main__']``, and typing resolves
    forward references through it.
    """
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    return main


def _assign_last_value(statement: ast.Expr) -> ast.Assign:
    """`__codemode_last_value__ = <the statement's expression>`, at the statement's place.

    The two new nodes get their positions here: `ast.fix_missing_locations` would walk the whole tree in
    Python (200 k instructions for `1 + 1`, more for every node of a longer program).
    """
    line, column, end_line, end_column = (
        statement.lineno, statement.col_offset, statement.end_lineno, statement.end_col_offset
    )  # fmt: skip
    target = ast.Name(
        _LAST_VALUE, ast.Store(), lineno=line, col_offset=column, end_lineno=end_line, end_col_offset=end_column
    )
    return ast.Assign(
        [target], statement.value, None, lineno=line, col_offset=column, end_lineno=end_line, end_col_offset=end_column
    )


class _Run:
    def __init__(self, code: str, options: dict[str, Any], reseed: bool) -> None:
        self.code = code
        self.reseed = reseed
        self.max_result_bytes = int(options.get("max_result_bytes", _DEFAULT_MAX_RESULT_BYTES))
        self.options = options
        self.diagnostics: list[dict[str, Any]] = []
        self.error: dict[str, Any] | None = None

    def execute(self) -> dict[str, Any]:
        if self.reseed:
            random.seed()  # the pre-init snapshot would otherwise replay one sequence every run
        linecache.cache[FILENAME] = (len(self.code), None, self.code.splitlines(True), FILENAME)
        main = _fresh_main()
        previous_main = sys.modules.get("__main__")
        sys.modules["__main__"] = main
        try:
            return self._execute_in(main.__dict__)
        finally:
            if previous_main is not None:  # a spare's warm-up leaves the image's own __main__ behind
                sys.modules["__main__"] = previous_main

    def _execute_in(self, namespace: dict[str, Any]) -> dict[str, Any]:
        _files.enter(self.options)
        try:
            code_object = self._compile()
        except SyntaxError as exc:
            return self._syntax_error(exc)
        try:
            self._execute(code_object, namespace)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                self._fail(exc, "UNCAUGHT_EXCEPTION", f"SystemExit({exc.code!r})")
        except BaseException as exc:
            self._classify(exc)
        if self.error is not None:
            return self._report(None)
        return self._report(self._result_value(namespace))

    def _compile(self) -> Any:
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        if _trailing.ends_with_expression(self.code) is False:
            return compile(self.code, FILENAME, "exec", flags=flags, dont_inherit=True)
        # A trailing expression (or doubt): through the AST, so every line and column stays the code's own (a
        # rewritten source would move the last line's columns, and a traceback's marks with them).
        tree = compile(self.code, FILENAME, "exec", flags=flags | ast.PyCF_ONLY_AST, dont_inherit=True)
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            tree.body[-1] = _assign_last_value(tree.body[-1])
        return compile(tree, FILENAME, "exec", flags=flags, dont_inherit=True)

    def _execute(self, code_object: Any, namespace: dict[str, Any]) -> None:
        outcome = eval(code_object, namespace)
        if outcome is not None and inspect.iscoroutine(outcome):  # top-level await; else the module's None
            loop = _loop.SandboxEventLoop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(outcome)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def _result_value(self, namespace: dict[str, Any]) -> Any:
        if "result" in namespace:
            return namespace["result"]
        return namespace.get(_LAST_VALUE)

    def _report(self, value: Any) -> dict[str, Any]:
        report: dict[str, Any] = {"ok": self.error is None, "diagnostics": self.diagnostics}
        if self.error is not None:
            report["error"] = self.error
            return report
        notes: list[str] = []
        try:
            data_json = _jsonable.dumps(_jsonable.to_jsonable(value, notes))
        except MemoryError:
            self._limit("memory", "The result did not fit in memory.", "MEMORY")
            return self._report(None)
        for note in notes[:20]:
            self._diagnose("warning", "RESULT_NOT_JSON", note, _HINTS["RESULT_NOT_JSON"])
        size = len(data_json.encode("utf-8", "surrogatepass"))  # a lone surrogate is the host's to replace
        if size > self.max_result_bytes:
            self._limit(
                "result_bytes",
                f"The result is {size} bytes of JSON; the limit is {self.max_result_bytes}.",
                "RESULT_TOO_LARGE",
            )
            return self._report(None)
        report["data_json"] = data_json
        return report

    def _syntax_error(self, exc: SyntaxError) -> dict[str, Any]:
        message = f"{exc.msg} (line {exc.lineno})"
        self.error = {"type": "SyntaxError", "message": message, "retryable": False}
        self._diagnose(
            "error",
            "SYNTAX_ERROR",
            message,
            _HINTS["SYNTAX_ERROR"],
            error_class="SyntaxError",
            line=exc.lineno,
            column=exc.offset,
        )
        return self._report(None)

    def _classify(self, exc: BaseException) -> None:
        if isinstance(exc, errors.SandboxLimitError):
            self.error = {"type": "SandboxLimitError", "message": str(exc), "retryable": False}
            self._diagnose(
                "error",
                "SANDBOX_LIMIT",
                str(exc),
                exc.hint,
                error_class="SandboxLimitError",
                limit=exc.detail.get("limit"),
            )
        elif isinstance(exc, MemoryError):
            self._limit("memory", "The run ran out of memory (MemoryError).", "MEMORY")
        elif isinstance(exc, ImportError):
            hint = getattr(exc, "hint", None) or hint_for(exc.name) or _import_hint(exc.name)
            self._fail(exc, "IMPORT_FAILURE", hint=hint)
        elif isinstance(exc, RecursionError):
            self._fail(exc, "UNCAUGHT_EXCEPTION", hint=_HINTS["RECURSION"])
        else:
            self._fail(exc, "UNCAUGHT_EXCEPTION", hint=getattr(exc, "hint", None) or _wall_hint(exc))

    def _fail(self, exc: BaseException, code: str, message: str | None = None, hint: str | None = None) -> None:
        text = _safe_str(exc)
        message = message or (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
        self.error = {"type": type(exc).__name__, "message": text or message, "retryable": False}
        frames = _sandbox_frames(exc.__traceback__)
        line = frames[-1]["line"] if frames else None
        self._diagnose(
            "error", code, message, hint or _HINTS[code], error_class=type(exc).__name__, line=line, frames=frames
        )

    def _limit(self, limit: str, message: str, hint_key: str) -> None:
        self.error = {"type": "SandboxLimitError", "message": message, "retryable": False}
        self._diagnose(
            "error", "SANDBOX_LIMIT", message, _HINTS[hint_key], error_class="SandboxLimitError", limit=limit
        )

    def _diagnose(self, severity: str, code: str, message: str, hint: str | None, **extra: Any) -> None:
        entry: dict[str, Any] = {"severity": severity, "code": code, "message": message}
        if hint:
            entry["hint"] = hint
        entry.update({key: value for key, value in extra.items() if value is not None})
        self.diagnostics.append(entry)
