"""PII tokenization: a real value the host restored into a call never comes back to the code.

The code holds a token; the host puts the real value into the call's arguments; the tool (a real MCP
server subprocess) gives it back glued to other text, in another case, URL-encoded, JSON-escaped, in
pieces, in its error text, or the schema check quotes it. Whatever form it takes, what the call returns
is scrubbed of that exact value first, so neither the run result nor the audit log holds it. Tokens
name their vault: one from another run (or an ended session) is refused, never resolved.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import data_of
from tests.integration.conftest import SERVERS
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._audit import AuditLog
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config

EMAIL = "alice.smith@example.com"
#: The code gets its token the way an agent does: from a tool's result (built from halves, so the
#: code that a traceback may quote holds no address).
GET_TOKEN = """
import json, urllib.parse
import servers.awkward_names as aw
from codemode.errors import CodemodeError
tok = json.loads(await aw.echo_args(to="alice.smith" + "@example.com"))["to"]

async def keep(call):
    try:
        return await call
    except CodemodeError as exc:
        return {"error": str(exc), "hint": exc.hint, "detail": getattr(exc, "detail", None),
                "errors": getattr(exc, "errors", None)}
"""
ATTACKS = (
    GET_TOKEN
    + """
seen = {"tok": tok}
seen["suffix"] = await keep(aw.echo_args(word=tok + "_"))
seen["dashes"] = await keep(aw.echo_args(word="-" * 70 + tok))
seen["letters"] = await keep(aw.echo_args(word="xyz" + tok + "abc"))
seen["nested_json"] = await keep(aw.echo_args(inner=json.dumps({"to": tok + "_"})))
seen["raw"] = await keep(aw.echo_args(word=tok + "_", raw=True))
seen["tool_error"] = await keep(aw.error_result(message="failed for " + tok + "_"))
seen["schema_suffix"] = await keep(aw._2fa_check(code=tok + "_"))
seen["schema_received_cut"] = await keep(aw._2fa_check(code="-" * 68 + tok))
seen["schema_message_cut"] = await keep(aw._2fa_check(code="-" * 288 + tok))
forms = await keep(aw.reformat(text="x" + tok + "y"))
seen["forms"] = forms
seen["decoded"] = {"url": urllib.parse.unquote(forms["url"]), "escaped": json.loads('"' + forms["escaped"] + '"'),
                   "pieces": "".join(forms["pieces"])}
seen["split_token"] = await keep(aw.echo_args(a=tok[:6], b=tok[6:]))
print(seen)
result = seen
"""
)
TOKEN = re.compile(r"<EMAIL_1_[a-z2-9]{6}>")


@pytest.fixture(scope="module")
def pii_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, Path]]:
    tmp = tmp_path_factory.mktemp("pii")
    config = parse_config({"mcpServers": {"awkward-names": {"command": sys.executable,
                                                            "args": [str(SERVERS / "awkward.py")]}}})  # fmt: skip
    audit = tmp / "audit.jsonl"
    with (
        (tmp / "servers.log").open("w") as errlog,
        Broker(config, errlog=errlog, warn=lambda m: None, audit=AuditLog(audit), pii="tokenize") as broker,
    ):
        yield broker, audit


def _run(runtime: Runtime, broker: Broker, code: str) -> dict[str, Any]:
    sandbox = Sandbox(Limits(timeout_ms=30_000), runtime=runtime, tools=broker, redactor=broker.redactor)
    return dict(sandbox.run_sync(code))


def _assert_no_value(text: str) -> None:
    lowered = text.lower()
    for form in (EMAIL, "alice.smith", "alice.smith%40example.com", "%40example.com"):
        assert form not in lowered, (form, text[max(0, lowered.find(form) - 200) : lowered.find(form) + 200])


def test_a_restored_value_never_comes_back_in_any_form_the_tool_gives_it(
    runtime: Runtime, pii_broker: tuple[Broker, Path]
) -> None:
    broker, audit = pii_broker
    result = _run(runtime, broker, ATTACKS)
    seen = data_of(result)
    _assert_no_value(json.dumps(result))
    _assert_no_value(audit.read_text())
    tok = seen["tok"]
    assert TOKEN.fullmatch(tok), tok
    # The tool got the real value (the echo shows where it was) and the code got the token back in its place.
    assert seen["suffix"] == json.dumps({"word": tok + "_"}, separators=(",", ":"))
    assert seen["dashes"] == json.dumps({"word": "-" * 70 + tok}, separators=(",", ":"))
    assert seen["letters"] == json.dumps({"word": "xyz" + tok + "abc"}, separators=(",", ":"))
    assert seen["forms"]["upper"] == "X" + tok + "Y" and seen["forms"]["lower"] == "x" + tok + "y"
    assert tok in seen["tool_error"]["error"]
    assert tok + "_" in json.dumps(seen["schema_suffix"])
    # A token cut in two is no token: it reaches the tool as the text it is, and nothing is restored.
    assert seen["split_token"] == json.dumps({"a": tok[:6], "b": tok[6:]}, separators=(",", ":"))


def test_a_token_of_another_run_is_refused_naming_it(runtime: Runtime, pii_broker: tuple[Broker, Path]) -> None:
    broker, _ = pii_broker
    first = data_of(_run(runtime, broker, GET_TOKEN + "result = tok"))
    code = GET_TOKEN + f"result = {{'own': tok, 'old': await keep(aw.echo_args(to={first!r} + '_'))}}"
    second = _run(runtime, broker, code)
    data = data_of(second)
    assert data["own"] != first  # every vault has its own tag
    assert first in data["old"]["error"] and "another run" in data["old"]["error"], data["old"]
    _assert_no_value(json.dumps(second))


def test_a_made_up_token_with_the_runs_own_tag_is_refused(runtime: Runtime, pii_broker: tuple[Broker, Path]) -> None:
    broker, _ = pii_broker
    code = (
        GET_TOKEN + "forged = tok.replace('EMAIL_1', 'EMAIL_7')\nresult = [forged, await keep(aw.echo_args(to=forged))]"
    )
    forged, answer = data_of(_run(runtime, broker, code))
    assert forged in answer["error"] and "never issued" in answer["error"], answer
