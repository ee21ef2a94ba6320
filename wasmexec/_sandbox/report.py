"""The guest's report of a run, parsed and checked: it is the sandboxed code's claim, never trusted.

Agent code can replace anything inside the sandbox, the bridge included, so the
report may be forged. Whatever it says, the host builds a run result that fits
the contract: wrong types are dropped, sizes and depth are capped, every string is
valid Unicode and every number finite; only the guest's own diagnostic codes are
kept, a limit it claims is left for the host to check (`GuestReport.claimed_limit`),
and nothing it says is retryable.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from dataclasses import dataclass, field
from typing import Any, get_args

from wasmexec._envelope import MAX_RESULT_DEPTH, Diagnostic, ErrorInfo, Frame, LimitName, valid_strings, valid_text

#: Diagnostics and frames kept from the guest; more is noise (or an attack on the reader).
MAX_DIAGNOSTICS = 50
MAX_FRAMES = 20
#: Longest text field kept from a guest diagnostic or error.
MAX_TEXT = 4000
#: The diagnostic codes the guest reports (bridge/codemode/_runner.py); every other code is the host's.
GUEST_CODES = frozenset({"SYNTAX_ERROR", "UNCAUGHT_EXCEPTION", "IMPORT_FAILURE", "RESULT_NOT_JSON"})
#: The guest's code for "a limit fired": a claim the host checks before it repeats it.
_LIMIT_CODE = "SANDBOX_LIMIT"

_LIMITS = set(get_args(LimitName))
_SEVERITIES = {"error", "warning", "info"}
_TEXT_FIELDS = ("hint", "path", "error_class")
# A surrogate reaches parsed data through an escape in data_json, or raw: data_json is itself a
# string in the report, and the report's own escapes can put a raw lone surrogate into it.
_SURROGATE_ESCAPE = re.compile("\\\\u[dD][89a-fA-F]|[\ud800-\udfff]")
# Only an exponent of 3+ digits or a run of 309+ digits can overflow a float to infinity.
_MAYBE_HUGE = re.compile(r"[eE]\+?[0-9]{3}|(?<![0-9])[0-9]{309}")
_KEEP_BRACKETS_AND_QUOTES = bytes(range(256)).translate(None, b'[]{}"')
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


@dataclass
class GuestReport:
    """What the guest said happened, reduced to what fits the run result."""

    ok: bool
    data: Any = None
    error: ErrorInfo | None = None
    limit: str | None = None
    """A limit the report shows was hit (the result's size or depth), decided on the host."""
    claimed_limit: LimitName | None = None
    """A limit the guest says fired (its SANDBOX_LIMIT diagnostic); the host decides whether it did."""
    claim: Diagnostic | None = None
    """That diagnostic as an UNCAUGHT_EXCEPTION, for when the host does not confirm the limit."""
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _unusable(why: str) -> ErrorInfo:
    return {"type": "SandboxError", "message": f"the guest's report is unusable: {why}", "retryable": False}


def parse_report(text: str, max_result_bytes: int) -> GuestReport:
    """Parses the `run` export's JSON; never raises."""
    if len(text) > 2 * max_result_bytes + (1 << 20):  # cheap first cut; the exact check is on data_json
        return GuestReport(False, limit="result_bytes")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return GuestReport(False, error=_unusable("not JSON"))
    if not isinstance(raw, dict) or not isinstance(raw.get("ok"), bool):
        return GuestReport(False, error=_unusable("not an object with a boolean 'ok'"))
    report = GuestReport(raw["ok"])
    _take_diagnostics(report, raw.get("diagnostics"))
    if report.ok:
        report.claimed_limit = report.claim = None  # a run that succeeded hit no limit
        _take_data(report, raw.get("data_json", "null"), max_result_bytes)
    else:
        report.error = _error(raw.get("error"))
    return report


def _take_data(report: GuestReport, data_json: Any, max_result_bytes: int) -> None:
    if not isinstance(data_json, str):
        report.ok, report.error = False, _unusable("data_json is not a string")
        return
    if len(data_json.encode("utf-8", "surrogatepass")) > max_result_bytes:
        report.ok, report.limit = False, "result_bytes"
        return
    if json_depth(data_json) > MAX_RESULT_DEPTH:
        report.ok, report.limit = False, "result_depth"
        return
    try:
        data = _strict_loads(data_json)
    except _NotStrict:
        report.ok, report.error = False, _unusable("data_json is not strict JSON (NaN, Infinity or out of range)")
        return
    except (ValueError, RecursionError):
        report.ok, report.error = False, _unusable("data_json is not JSON")
        return
    report.data = valid_strings(data) if _SURROGATE_ESCAPE.search(data_json) else data


class _NotStrict(ValueError):
    """JSON that Python parses but strict parsers refuse: NaN, Infinity, a number out of range."""


def _refuse_constant(name: str) -> Any:
    raise _NotStrict(name)


def _finite_float(text: str) -> float:
    number = float(text)
    if number - number != 0:  # inf - inf is nan
        raise _NotStrict(text)
    return number


def _strict_loads(text: str) -> Any:
    parse_float = _finite_float if _MAYBE_HUGE.search(text) else float  # checking every float costs 70%
    return json.loads(text, parse_constant=_refuse_constant, parse_float=parse_float)


def json_depth(text: str) -> int:
    """How deeply containers nest in JSON text (``1`` is 0, ``[[]]`` is 2), in linear time.

    Strings are skipped (a bracket in a string does not count); the text must be valid JSON.
    """
    if "\\" in text:  # drop escaped backslashes, then escaped quotes: only string delimiters remain
        text = text.replace("\\\\", "").replace('\\"', "")
    skeleton = text.encode("utf-8", "surrogatepass").translate(None, _KEEP_BRACKETS_AND_QUOTES)
    brackets = b"".join(skeleton.split(b'"')[::2]).translate(_BRACKET_STEPS)  # openers 2, closers 0
    # After k brackets, twice the openers so far minus k is the depth there.
    return max(map(operator.sub, itertools.accumulate(brackets), itertools.count(1)), default=0)


def _text(value: Any) -> str | None:
    return valid_text(value[:MAX_TEXT]) if isinstance(value, str) else None


def _error(raw: Any) -> ErrorInfo:
    if not isinstance(raw, dict):
        return {"type": "Error", "message": "the code failed (no details)", "retryable": False}
    return {
        "type": (_text(raw.get("type")) or "Error")[:200],
        "message": _text(raw.get("message")) or "",
        "retryable": False,  # the host decides what is worth retrying
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _frames(raw: Any) -> list[Frame] | None:
    if not isinstance(raw, list):
        return None
    frames: list[Frame] = []
    for item in raw[-MAX_FRAMES:]:
        if isinstance(item, dict) and _int(item.get("line")) is not None:
            frames.append({"line": item["line"], "function": (_text(item.get("function")) or "?")[:200],
                           "text": (_text(item.get("text")) or "")[:500]})  # fmt: skip
    return frames


def _diagnostic(raw: dict[str, Any], code: str) -> Diagnostic | None:
    severity, message = raw.get("severity"), _text(raw.get("message"))
    if not isinstance(severity, str) or severity not in _SEVERITIES or message is None:
        return None
    entry: Diagnostic = {"severity": severity, "code": code, "message": message}  # type: ignore[typeddict-item]
    for key in _TEXT_FIELDS:
        if (text := _text(raw.get(key))) is not None:
            entry[key] = text  # type: ignore[literal-required]
    for key in ("line", "column"):
        if (number := _int(raw.get(key))) is not None:
            entry[key] = number  # type: ignore[literal-required]
    if (frames := _frames(raw.get("frames"))) is not None:
        entry["frames"] = frames
    return entry


def _take_diagnostics(report: GuestReport, raw: Any) -> None:
    if not isinstance(raw, list):
        return
    for item in raw[:MAX_DIAGNOSTICS]:
        code = item.get("code") if isinstance(item, dict) else None
        if not isinstance(code, str):
            continue
        if code in GUEST_CODES and (entry := _diagnostic(item, code)) is not None:
            report.diagnostics.append(entry)
        elif code == _LIMIT_CODE and report.claim is None and (entry := _diagnostic(item, "UNCAUGHT_EXCEPTION")):
            report.claim = entry
            limit = item.get("limit")
            report.claimed_limit = limit if isinstance(limit, str) and limit in _LIMITS else None  # type: ignore[assignment]
