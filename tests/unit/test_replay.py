"""Approvals by replay, piece by piece: the journal, the shared approval records, and the sealed state's binding."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.types import InputRequiredResult

from wasmexec._runctx.journal import Journal, pack, unpack
from wasmexec._runctx.toolhost import HostCallError
from wasmexec._server import replay
from wasmexec._state.approvals import UNCERTAIN, ApprovalStore, InUse, Recorded
from wasmexec._state.key import StateKey

KEY = StateKey(b"k" * 32, source="test")


def _first_run() -> Journal:
    """A run that read two values with gather (they ended in the other order), then asked about a launch."""
    journal = Journal()
    assert journal.start(1, "s", "read", "tool", {"k": "a"}) == ("live", None)
    assert journal.start(2, "s", "read", "tool", {"k": "b"}) == ("live", None)
    assert journal.start(3, "s", "read", "tool", {"k": "a"}) == ("live", None)  # the same call, a second time
    journal.done(2, '"B"')
    journal.done(3, '"A2"')
    journal.done(1, '"A1"')
    journal.start(4, "s", "launch", "tool", {"name": "x"})
    journal.asking(4)
    return journal


def _replay(journal: Journal, answer: bool = True) -> Journal:
    return Journal.replaying(unpack(pack(journal.snapshot(4))), answer, None)


def test_a_replay_answers_logged_calls_by_key_and_occurrence_whatever_order_they_ended_in() -> None:
    replayed = _replay(_first_run())
    assert replayed.start(10, "s", "read", "tool", {"k": "a"}) == ("replayed", ('"A1"', False))
    assert replayed.start(11, "s", "read", "tool", {"k": "b"}) == ("replayed", ('"B"', False))
    assert replayed.start(12, "s", "read", "tool", {"k": "a"}) == ("replayed", ('"A2"', False))
    assert replayed.start(13, "s", "launch", "tool", {"name": "x"}) == ("approved", None)
    assert replayed.is_approved(13) and replayed.answer is True
    assert replayed.start(14, "s", "read", "tool", {"k": "c"}) == ("live", None)  # after the approved call: live


def test_a_call_not_in_the_log_before_the_approved_one_is_a_divergence() -> None:
    stopped: list[str] = []
    replayed = _replay(_first_run())
    replayed.on_diverge = stopped.append
    assert replayed.start(10, "s", "read", "tool", {"k": "other"}) == ("diverged", None)
    assert replayed.diverged is not None and "s.read" in replayed.diverged and stopped == [replayed.diverged]
    assert replayed.start(11, "s", "launch", "tool", {"name": "other"})[0] == "diverged"  # other arguments


def test_errors_and_refusals_are_replayed_as_the_guest_got_them() -> None:
    journal = Journal()
    journal.start(1, "s", "t", "tool", {})
    journal.done(1, HostCallError("tool-error", "boom", "a hint", limit="x"))
    journal.start(2, "s", "bad", "tool", {})
    journal.done(2, HostCallError("invalid-argument", "no"), refused=True)
    journal.start(3, "s", "launch", "tool", {})
    replayed = Journal.replaying(unpack(pack(journal.snapshot(3))), False, None)
    verdict, (error, refused) = replayed.start(7, "s", "t", "tool", {})
    assert verdict == "replayed" and not refused
    assert (error.kind, error.message, error.hint, error.detail) == ("tool-error", "boom", "a hint", {"limit": "x"})
    assert replayed.start(8, "s", "bad", "tool", {})[1][1] is True


def test_calls_waiting_for_an_approval_of_their_own_when_the_run_paused_run_again_live() -> None:
    journal = _first_run()
    journal.start(5, "s", "launch", "tool", {"name": "y"})
    journal.asking(5)
    replayed = _replay(journal)
    for handle, args in ((10, {"k": "a"}), (11, {"k": "b"}), (12, {"k": "a"})):
        replayed.start(handle, "s", "read", "tool", args)
    assert replayed.start(13, "s", "launch", "tool", {"name": "y"}) == ("live", None)  # asked again, not diverged
    assert replayed.start(14, "s", "launch", "tool", {"name": "x"}) == ("approved", None)


def test_the_log_grows_with_each_replay() -> None:
    replayed = _replay(_first_run())
    for handle, args in ((10, {"k": "a"}), (11, {"k": "b"}), (12, {"k": "a"})):
        replayed.start(handle, "s", "read", "tool", args)
    replayed.start(13, "s", "launch", "tool", {"name": "x"})
    replayed.done(13, '"launched"')
    replayed.start(14, "s", "launch", "tool", {"name": "second"})
    snapshot = replayed.snapshot(14)
    assert len(snapshot["log"]) == 4 and snapshot["origin"] == replayed.origin


def test_sampling_answers_are_logged_and_replayed() -> None:
    asked: list[dict[str, Any]] = []
    journal = Journal()
    sample = journal.sampler(lambda request: asked.append(request) or f"answer {len(asked)}")
    assert sample({"prompt": "p", "system": None, "max_tokens": 5}) == "answer 1"
    journal.start(1, "s", "launch", "tool", {})
    replayed = Journal.replaying(unpack(pack(journal.snapshot(1))), True, None)
    again = replayed.sampler(lambda request: pytest.fail("the model was asked again"))
    assert again({"prompt": "p", "system": None, "max_tokens": 5}) == "answer 1" and len(asked) == 1


def test_wait_quiet_returns_once_every_open_call_is_asking() -> None:
    journal = _first_run()
    journal.start(6, "s", "read", "tool", {"k": "slow"})
    waiting = threading.Thread(target=journal.wait_quiet, args=(time.monotonic() + 30,))
    waiting.start()
    waiting.join(0.1)
    assert waiting.is_alive()  # call 6 has not ended: the log would miss it
    journal.done(6, '"late"')
    waiting.join(10)
    assert not waiting.is_alive() and len(journal.snapshot(4)["log"]) == 4


# -- the shared approval records ----------------------------------------------------------------


def test_a_state_is_claimed_once_at_a_time_and_its_answer_is_recorded_for_a_second_retry(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path, KEY)
    nonce, expires = "n" * 24, 2_000_000_000
    claim = store.claim(nonce, expires)
    assert not isinstance(claim, Recorded)
    with pytest.raises(InUse):  # a second retry while the first runs (another descriptor: flock conflicts)
        store.claim(nonce, expires)
    assert claim.before_call() is None
    claim.after_call('"done"')
    claim.finish({"kind": "call", "result": {"content": []}})
    claim.release()
    again = store.claim(nonce, expires)
    assert isinstance(again, Recorded) and again.result["kind"] == "call"


def test_an_approved_call_started_by_a_replica_that_died_is_not_run_again(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path, KEY)
    claim = store.claim("m" * 24, 2_000_000_000)
    assert not isinstance(claim, Recorded) and claim.before_call() is None
    claim.release()  # what the kernel does when the process dies
    takeover = store.claim("m" * 24, 2_000_000_000)
    assert not isinstance(takeover, Recorded) and takeover.before_call() is UNCERTAIN


def test_records_are_sealed_and_a_swapped_or_foreign_record_does_not_open(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path, KEY)
    claim = store.claim("a" * 24, 2_000_000_000)
    assert not isinstance(claim, Recorded)
    claim.release()
    record = next(tmp_path.glob("*.rec"))
    assert b"call" not in record.read_bytes()
    os.replace(record, record.with_name(record.name.replace("a" * 24, "b" * 24)))
    with pytest.raises(Exception, match="record"):
        store.claim("b" * 24, 2_000_000_000)
    other = ApprovalStore(tmp_path, StateKey.ephemeral())
    with pytest.raises(Exception, match="record"):
        other.claim("b" * 24, 2_000_000_000)


def test_large_logs_are_kept_by_digest_and_expired_records_are_swept(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path, KEY)
    name = store.put_log(b"x" * 100, 1_000)
    assert store.get_log(name) == b"x" * 100
    kept = store.put_log(b"y", 2_000_000_000)
    store.sweep(now=2_000)
    assert not (tmp_path / name).exists() and (tmp_path / kept).exists()


# -- the sealed state's binding (the SDK's boundary under the state key) ------------------------


def _ctx(arguments: dict[str, Any], state: str | None = None) -> ServerRequestContext[Any, Any]:
    params: dict[str, Any] = {"name": "run_python", "arguments": arguments}
    if state is not None:
        params["requestState"] = state
    return ServerRequestContext(session=None, lifespan_context={}, protocol_version="2026-07-28",  # type: ignore[arg-type]
                                method="tools/call", params=params, request=SimpleNamespace(headers={}))  # fmt: skip


def _as(subject: str | None) -> Any:
    if subject is None:
        return None
    token = AccessToken(token="t", client_id="c", scopes=[], subject=subject)
    return AuthenticatedUser(token)


def _through(ctx: ServerRequestContext[Any, Any], subject: str | None) -> Any:
    """Sends one request through the boundary as `subject`; returns what the handler saw, or the sealed state."""
    seen: list[Any] = []

    async def handler(inner: ServerRequestContext[Any, Any]) -> Any:
        seen.append((inner.params or {}).get("requestState"))
        return InputRequiredResult(input_requests={}, request_state="inner plaintext")

    async def main() -> Any:
        reset = auth_context_var.set(_as(subject))
        try:
            result = await replay.boundary(KEY, 20)(ctx, handler)
        finally:
            auth_context_var.reset(reset)
        return seen[0], result.request_state

    return anyio.run(main)


def test_the_state_is_sealed_and_opens_only_for_the_same_principal_and_request() -> None:
    arguments = {"code": "launch()"}
    _, sealed = _through(_ctx(arguments), "alice")
    assert "inner plaintext" not in sealed
    assert _through(_ctx(arguments, sealed), "alice")[0] == "inner plaintext"
    refusals = [
        (_ctx(arguments, sealed), "bob"),  # another principal
        (_ctx(arguments, sealed), None),  # no principal at all
        (_ctx({"code": "launch(); more()"}, sealed), "alice"),  # other code
        (_ctx({**arguments, "timeout_ms": 5}, sealed), "alice"),  # another argument
        (_ctx(arguments, sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:]), "alice"),  # tampered
        (_ctx(arguments, replay.boundary.__name__), "alice"),  # not a state at all
    ]
    for ctx, subject in refusals:
        with pytest.raises(MCPError) as refused:
            _through(ctx, subject)
        assert refused.value.code == -32602 and refused.value.error.message == "Invalid or expired requestState"


def test_a_state_past_its_runs_deadline_or_for_other_arguments_is_refused() -> None:
    store_state = {"v": 1, "kind": "replay", "nonce": "n" * 24, "deadline": 1.0, "request": replay.request_digest({})}
    with pytest.raises(MCPError, match="Invalid or expired"):
        replay.read_state(json.dumps(store_state), {})
    store_state["deadline"] = 2e9
    assert replay.read_state(json.dumps(store_state), {})["nonce"] == "n" * 24
    with pytest.raises(MCPError, match="Invalid or expired"):
        replay.read_state(json.dumps(store_state), {"code": "x"})


def test_a_replays_vault_resolves_the_tokens_the_paused_run_handed_out() -> None:
    from wasmexec._tools.pii import PiiVault

    first = PiiVault("tokenize")
    token = first.scrub("write to ada@example.com")[len("write to ") :]
    again = PiiVault.imported(json.loads(json.dumps(first.export())), "tokenize")
    assert again.tag == first.tag and again.restore({"to": token})[0] == {"to": "ada@example.com"}
    assert again.scrub("bob@example.com") != token  # numbering goes on after the imported tokens
    session = PiiVault("tokenize", tag=first.tag)
    session.merge(first.export())
    assert session.restore(token)[0] == "ada@example.com"
    stranger = PiiVault("tokenize")
    stranger.merge(first.export())  # another vault's export adds nothing
    with pytest.raises(HostCallError):
        stranger.restore(token)


def test_a_run_whose_calls_returned_too_much_cannot_pause_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from wasmexec._runctx import journal as _replay

    monkeypatch.setattr(_replay, "MAX_LOG_BYTES", 1000)
    journal = Journal()
    journal.start(1, "s", "big", "tool", {})
    journal.done(1, "x" * 1001)
    journal.start(2, "s", "launch", "tool", {})
    with pytest.raises(_replay.LogTooLarge, match="at most 1000"):
        journal.snapshot(2)


def test_a_packed_log_that_inflates_past_its_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import zlib

    from wasmexec._runctx import journal as _replay

    monkeypatch.setattr(_replay, "MAX_UNPACKED_BYTES", 1000)
    with pytest.raises(ValueError, match="inflates past"):
        unpack(zlib.compress(b"[" + b" " * 5000 + b"]"))


def _asking_run() -> tuple[Journal, dict[str, Any]]:
    """A run that read a value, then asked the client's model two questions together (2026: the run pauses)."""
    journal = Journal()
    journal.start(1, "s", "read", "tool", {"k": "a"})
    journal.done(1, '"A"')
    snapshots: dict[str, Any] = {}
    released = threading.Event()

    def pause(request: dict[str, Any]) -> Any:  # as `ServerRun._pause_to_ask`: the first pauses, the other waits
        if request["prompt"] == "q1":
            journal.wait_quiet(time.monotonic() + 5)  # waits for q2, started with it, to be asked too
            snapshots["taken"] = unpack(pack(journal.snapshot(None)))
            released.set()
        released.wait(5)
        raise HostCallError("unavailable", "paused", "")

    ask = journal.sampler(pause)
    raised: list[str] = []

    def question(prompt: str) -> None:
        try:
            ask({"prompt": prompt, "system": None, "max_tokens": 5})
        except HostCallError as error:
            raised.append(error.message)

    journal.sample_started()
    journal.sample_started()
    threads = [threading.Thread(target=question, args=(prompt,)) for prompt in ("q1", "q2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert raised == ["paused", "paused"]
    return journal, snapshots["taken"]


def test_a_pause_to_ask_the_model_carries_every_question_asked_and_its_replay_gives_them_the_answers() -> None:
    _, snapshot = _asking_run()
    assert snapshot["pending"] is None
    assert sorted(request["prompt"] for *_, request in snapshot["asked"]) == ["q1", "q2"]
    answers = [{"text": f"answer to {request['prompt']}", "model": "m"} for *_, request in snapshot["asked"]]
    replayed = Journal.replaying(snapshot, False, None, answers)
    assert replayed.start(1, "s", "read", "tool", {"k": "a"})[0] == "replayed"

    def never(request: dict[str, Any]) -> Any:
        raise AssertionError("a paused question is answered from the retry")

    ask = replayed.sampler(never)
    for prompt in ("q2", "q1"):
        assert ask({"prompt": prompt, "system": None, "max_tokens": 5})["text"] == f"answer to {prompt}"
    assert replayed.check_resumed() is None
    assert replayed.start(2, "s", "launch", "tool", {})[0] == "live"  # past the pause: an ordinary run again


def test_a_replay_that_calls_another_tool_or_never_asks_the_paused_question_has_diverged() -> None:
    _, snapshot = _asking_run()
    refused = HostCallError("tool-error", "the user refused", "")
    replayed = Journal.replaying(snapshot, False, None, [refused, {"text": "t", "model": ""}])
    assert replayed.start(1, "s", "other", "tool", {})[0] == "diverged"  # before the questions: not run
    quiet = Journal.replaying(snapshot, False, None, [refused, refused])
    assert quiet.check_resumed() is not None and "did not ask" in str(quiet.diverged)
    with pytest.raises(ValueError, match="2 questions"):
        Journal.replaying(snapshot, False, None, [refused])
