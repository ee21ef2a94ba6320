"""Approvals: what the user is asked before a call that needs approval, and what is recorded.

`settle` decides a call's approval from the policy's decision: no approval needed,
approved in advance (``--approve``, ``pre_approved``), or asked of the run's approver.
It adds "APPROVED" or "DENIED" to `run.approvals` for every call that needed approval
and returns the word the audit line records.

The question shows the call whole (server, tool, every argument as indented JSON) or
not at all: a question longer than `MAX_QUESTION_CHARS` is never shown cut, the call
is refused with a ``denied`` error that says why. Everything in it comes from the
guest or from a server, so every character that could hide or disguise text is made
visible as a JSON escape (``\\u202e``): C0 and C1 controls and DEL, bidi controls,
zero-width and other format characters (Unicode category ``Cf``), line and paragraph
separators, surrogates, private-use and unassigned code points, and the fillers and
selectors that render as nothing. Inside the JSON the escapes keep their meaning:
the shown arguments still parse to the arguments that will be sent.

`wasmexec serve` asks it through MCP elicitation (`_question` in the server) and a
Python approver finds it under ``"question"`` in the request it is given.
"""

from __future__ import annotations

import functools
import json
import threading
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from wasmexec._runctx.toolhost import HostCallError

if TYPE_CHECKING:
    from wasmexec._redact import Redactor
    from wasmexec._runctx.runstate import RunState
    from wasmexec._tools.catalog import ToolEntry
    from wasmexec._tools.policy import Decision

#: A question longer than this is refused, not cut: an approval dialog or a terminal shows
#: about this much at once, and anything the user cannot see must not be approved.
MAX_QUESTION_CHARS = 4_000

#: Unicode categories whose characters are invisible, control the display, or have no glyph.
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
#: Characters outside those categories that still render as nothing (fillers, joiners, selectors).
_HIDDEN_EXTRA = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2800, 0x3164, 0xFFA0,
                 *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}  # fmt: skip


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in _HIDDEN_CATEGORIES or ord(char) in _HIDDEN_EXTRA


def _escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # as JSON writes it: a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every hidden or display-controlling character replaced by its JSON escape.

    Newlines and tabs are kept (the question's own layout uses them); inside JSON strings
    `json.dumps` has already escaped them.
    """
    return "".join(_escape(char) if char not in "\n\t" and _hidden(char) else char for char in text)


def approval_request(
    server_id: str, tool_name: str, annotations: dict[str, Any], arguments: dict[str, Any]
) -> dict[str, Any]:
    """What the run's approver is given: the call, and under ``"question"`` the text to show.

    `arguments` should already have the configured secrets redacted.

    Raises:
        HostCallError: ``denied``, when the question would be longer than `MAX_QUESTION_CHARS`.
    """
    name = visible(f"{server_id}.{tool_name}")
    destructive = " (marked destructive: it may delete or overwrite data)" if annotations.get("destructiveHint") else ""
    shown = visible(json.dumps(arguments, ensure_ascii=False, indent=2))
    question = f"The sandboxed code wants to call {name}{destructive} with these arguments:\n{shown}\nAllow it?"
    if len(question) > MAX_QUESTION_CHARS:
        raise HostCallError(
            "denied",
            f"{name} needs the user's approval, but its arguments are too large to show in full "
            f"({len(question)} characters; the limit is {MAX_QUESTION_CHARS}), so it was refused without asking",
            "Split the work into calls with smaller arguments, or have the tool pre-approved on the host "
            "(wasmexec run --approve GLOB, or pre_approved in the policy).",
        )
    return {"server_id": server_id, "tool_name": tool_name, "annotations": annotations, "arguments": arguments,
            "question": question}  # fmt: skip


async def settle(
    run: RunState, entry: ToolEntry, arguments: dict[str, Any], decision: Decision, redactor: Redactor,
    handle: int = 0,
) -> tuple[str, HostCallError | None]:  # fmt: skip
    """(the audit's approval word, the refusal if the call may not go ahead).

    Words: "not_required", "pre_approved", "approved", "denied", "no_one_to_ask", "too_large_to_show",
    "paused" (the run ended to be replayed with the answer, 2026 era). In a replayed run
    (`wasmexec._runctx.journal`), the call the run paused on takes the answer the user gave with the
    retry, without asking again.
    """
    if decision in ("allow", "deny"):
        return "not_required", None
    if decision == "pre_approved":
        run.approvals.append("APPROVED")
        return "pre_approved", None
    if run.approver is None:
        run.approvals.append("DENIED")
        return "no_one_to_ask", _not_approved(entry, "no_one_to_ask")
    shown, _ = redactor.redact(arguments)
    try:
        request = approval_request(entry.server_id, entry.tool_name, entry.tool.get("annotations") or {}, shown)
    except HostCallError as refusal:
        run.approvals.append("DENIED")
        return "too_large_to_show", refusal
    journal = run.journal
    if journal is not None and journal.is_approved(handle):
        accepted = journal.answer
        run.approvals.append("APPROVED" if accepted else "DENIED")
    else:
        if journal is not None:
            journal.asking(handle)
        # Not approved until the answer says so: a run that ends while the question is out (cancelled, paused
        # for a replay, or its server shutting down) is reported DENIED, whichever of the answer and the end
        # comes first.
        index = len(run.approvals)
        run.approvals.append("DENIED")
        approver = functools.partial(_ask, run.approver, request, handle)
        try:
            accepted = await anyio.to_thread.run_sync(approver, abandon_on_cancel=True) is True
        except HostCallError as refusal:  # the approver could not ask, and says why
            return "not_asked", refusal
        except Exception:  # an approver that fails has not approved
            accepted = False
        if journal is not None and journal.paused_on is not None:  # the run ends here; its replay asks again
            return "paused", HostCallError("denied", "the run paused for the user's approval")
        if accepted:
            run.approvals[index] = "APPROVED"
    return ("approved", None) if accepted else ("denied", _not_approved(entry, "denied"))


_asking = threading.local()


def _ask(approver: Callable[[dict[str, Any]], bool], request: dict[str, Any], handle: int) -> bool:
    _asking.handle = handle
    try:
        return approver(request)
    finally:
        _asking.handle = None


def asking_handle() -> int | None:
    """The handle of the call an approver running on this thread is asked about (a server pausing
    the run by replay needs it; the request itself stays what Python approvers have always seen)."""
    handle: int | None = getattr(_asking, "handle", None)
    return handle


def _not_approved(entry: ToolEntry, approval: str) -> HostCallError:
    name = visible(f"{entry.server_id}.{entry.tool_name}")
    if approval == "no_one_to_ask":
        return HostCallError(
            "denied", f"{name} needs the user's approval and there is no one to ask",
            "Use an MCP client that supports elicitation, pre-approve it (wasmexec run --approve GLOB), "
            "or change the host's policy.",
        )  # fmt: skip
    return HostCallError("denied", f"the user did not approve {name}",
                         "Do not retry the same call; ask the user or do something else.")  # fmt: skip
