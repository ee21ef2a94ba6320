"""The guest's report of a run, parsed and checked: it is the sandboxed code's claim, never trusted.

Agent code can replace anything inside the sandbox, the bridge included, so the
report may be forged. Whatever it says, the host builds a run result that fits
the contract: wrong types are dropped, sizes are capped, the result size limit is
enforced here, not in the guest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, get_args

from wasmexec._envelope import Diagnostic, ErrorInfo, Frame, LimitName

#: Diagnostics and frames kept from the guest; more is noise (or an attack on the reader).
MAX_DIAGNOSTICS = 50
MAX_FRAMES = 20
#: Longest text field kept from a guest diagnostic or error.
MAX_TEXT = 4000

_LIMITS = set(get_args(LimitName))
_SEVERITIES = {"error", "warning", "info"}
_TEXT_FIELDS = ("hint", "path", "error_class")


@dataclass
class GuestReport:
    """What the guest said happened, reduced to what fits the run result."""

    ok: bool
    data: Any = None
    error: ErrorInfo | None = None
    limit: str | None = None
    """A limit the report shows was hit (the result size), decided on the host."""
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _unreadable(why: str) -> GuestReport:
    return GuestReport(False, error={"type": "SandboxError", "message": f"the guest's report is unusable: {why}",
                                     "retryable": False})  # fmt: skip


def parse_report(text: str, max_result_bytes: int) -> GuestReport:
    """Parses the `run` export's JSON; never raises."""
    if len(text) > 2 * max_result_bytes + (1 << 20):  # cheap first cut; the exact check is on data_json
        return GuestReport(False, limit="result_bytes")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return _unreadable("not JSON")
    if not isinstance(raw, dict) or not isinstance(raw.get("ok"), bool):
        return _unreadable("not an object with a boolean 'ok'")
    report = GuestReport(raw["ok"], diagnostics=_diagnostics(raw.get("diagnostics")))
    if report.ok:
        _take_data(report, raw.get("data_json", "null"), max_result_bytes)
    else:
        report.error = _error(raw.get("error"))
    return report


def _take_data(report: GuestReport, data_json: Any, max_result_bytes: int) -> None:
    if not isinstance(data_json, str):
        report.ok, report.error = False, _unreadable("data_json is not a string").error
        return
    if len(data_json.encode("utf-8", "surrogatepass")) > max_result_bytes:
        report.ok, report.limit = False, "result_bytes"
        return
    try:
        report.data = json.loads(data_json)
    except (ValueError, RecursionError):
        report.ok, report.error = False, _unreadable("data_json is not JSON").error


def _text(value: Any) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def _error(raw: Any) -> ErrorInfo:
    if not isinstance(raw, dict):
        return {"type": "Error", "message": "the code failed (no details)", "retryable": False}
    return {
        "type": (_text(raw.get("type")) or "Error")[:200],
        "message": _text(raw.get("message")) or "",
        "retryable": raw.get("retryable") is True,
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


def _diagnostic(raw: Any) -> Diagnostic | None:
    if not isinstance(raw, dict) or raw.get("severity") not in _SEVERITIES:
        return None
    code, message = _text(raw.get("code")), _text(raw.get("message"))
    if code is None or message is None:
        return None
    entry: Diagnostic = {"severity": raw["severity"], "code": code[:64], "message": message}
    for key in _TEXT_FIELDS:
        if (text := _text(raw.get(key))) is not None:
            entry[key] = text  # type: ignore[literal-required]
    for key in ("line", "column"):
        if (number := _int(raw.get(key))) is not None:
            entry[key] = number  # type: ignore[literal-required]
    if (frames := _frames(raw.get("frames"))) is not None:
        entry["frames"] = frames
    if raw.get("limit") in _LIMITS:
        entry["limit"] = raw["limit"]
    return entry


def _diagnostics(raw: Any) -> list[Diagnostic]:
    if not isinstance(raw, list):
        return []
    return [entry for entry in map(_diagnostic, raw[:MAX_DIAGNOSTICS]) if entry is not None]
