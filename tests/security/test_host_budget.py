"""The host functions are untrusted input with a budget.

Epochs stop wasm, not host code: whatever a host function does with what the guest
sends escapes the run's deadline and memory limit unless the host bounds it itself.
Each attack below calls the raw host interface (the component's WIT imports, the science
image's door), bypassing the bridge's own checks as an attacker would, against a real
broker over real test servers, and must end within the deadline plus `SLACK_S`, with a
clear error in the guest, and without the host allocating much more than the guest sent
(peak traced by tracemalloc).

The issue asks for at most 100 ms of host work past the deadline; `SLACK_S` is larger
because a shared 2-core test machine is noisy. The numbers measured are in the
hostbudget notes.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wasmtime.component import _enter as wasmtime_enter

from tests.helpers import data_of, error_of, limit_of, python_allocations
from tests.security._support import RAW_HOST, profile_of
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._redact import Redactor
from wasmexec._runctx.runstate import RunState, bound
from wasmexec._runctx.toolhost import HostCallError, NoTools
from wasmexec._sandbox import hostcalls
from wasmexec._sandbox.run import execute
from wasmexec._tools.broker import Broker
from wasmexec._tools.config import parse_config
from wasmexec._tools.schema_cache import cache_key
from wasmexec._tools.validation import MAX_PATTERN_SUBJECT_CHARS, backtracking_prone, schema_errors

SERVERS = Path(__file__).resolve().parent.parent / "servers"
#: Wall time allowed past the deadline on a noisy shared machine (the goal is 100 ms of host work).
SLACK_S = 1.0
#: The deadline of every attack run.
DEADLINE_MS = 1_000
#: The deadline of attacks whose guest needs time to build its payload (tens of MB of wasm work).
ROOMY_DEADLINE_MS = 15_000
#: Host time one refused or bounded host call may take, measured by the guest around the call
#: (the goal is under 100 ms; a noisy shared machine gets slack).
HOST_CALL_S = 0.5
#: A backtracking-prone pattern (nested quantifiers): `re` needs 2**n steps to reject "a" * n + "!".
REDOS_PATTERN = "^(a+)+$"

_PATTERNS_LISTING = {
    "server_name": "patterns", "server_version": "1.0.0", "title": None, "instructions": None,
    "protocol_version": "2025-06-18",
    "tools": [
        {"name": "check_word", "description": "Checks a word.",
         "inputSchema": {"type": "object", "properties": {"word": {"type": "string", "pattern": REDOS_PATTERN}},
                         "required": ["word"]}},
        {"name": "check_words", "description": "Checks many words.",
         "inputSchema": {"type": "object", "required": ["words"], "properties": {
             "words": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2}}}}},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """Real servers (slow, awkward) plus `patterns`, whose listing is cached and whose process never starts."""
    tmp = tmp_path_factory.mktemp("host-budget")
    config = parse_config({"mcpServers": {
        "slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]},
        "awkward": {"command": sys.executable, "args": [str(SERVERS / "awkward.py")]},
        "patterns": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]},
    }})  # fmt: skip
    errlog = (tmp / "servers.log").open("w")
    with Broker(config, cache_path=tmp / "schemas.json", errlog=errlog, warn=lambda message: None) as broker:
        broker.cache.put(cache_key("patterns", config.servers["patterns"].fingerprint), _PATTERNS_LISTING)
        assert broker.refresh(["slow", "awkward"]) == {"slow": "ok", "awkward": "ok"}
        yield broker
    errlog.close()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker of its own (the `slow` server), for an attack that trips the pool's queue and breaker."""
    config = parse_config({"mcpServers": {"slow": {"command": sys.executable, "args": [str(SERVERS / "slow.py")]}}})
    with (tmp_path / "servers.log").open("w") as errlog, Broker(config, errlog=errlog) as broker:
        assert broker.refresh(["slow"]) == {"slow": "ok"}
        yield broker


def _sandbox(runtime: Runtime, broker: Broker) -> Sandbox:
    return Sandbox(Limits(timeout_ms=DEADLINE_MS), runtime=runtime, tools=broker, redactor=broker.redactor)


def _timed(sandbox: Sandbox, code: str, limits: Limits | None = None) -> tuple[dict[str, Any], float]:
    """Runs `code`; returns the result and the wall time in seconds."""
    started = time.monotonic()
    result = dict(sandbox.run_sync(code, limits))
    return result, time.monotonic() - started


def _measured(
    sandbox: Sandbox, code: str, limits: Limits | None, host_time: list[float]
) -> tuple[dict[str, Any], float, int]:
    """Runs `code` twice: returns the result and wall time in seconds of the first run, and the peak
    of Python allocations in the second (traced by tracemalloc, which slows Python code down, so
    its host calls are left out of `host_time`)."""
    result, elapsed = _timed(sandbox, code, limits)
    timed_calls = len(host_time)
    try:
        with python_allocations() as allocated:
            sandbox.run_sync(code, limits)
            peak = allocated()
    finally:
        del host_time[timed_calls:]
    return result, elapsed, peak


def _raw(call: str, setup: str = "") -> str:
    """Guest code that makes one raw call on the WIT host interface and returns how it ended."""
    return (
        "import json\n" + RAW_HOST + "TOOL = host.CallKind.TOOL\n"
        f"{setup}\n"
        "try:\n"
        f"    value = {call}\n"
        "    result = ['ok', value if isinstance(value, int) else str(value)[:200]]\n"
        "except Err as err:\n"
        "    result = ['err', err.value.kind.name, err.value.message[:1000], err.value.hint]\n"
    )


@pytest.fixture
def host_time(monkeypatch: pytest.MonkeyPatch, runtime: Runtime) -> list[float]:
    """Seconds each host call (catalog, start-call, wait, the clock) spent on the host, timed around
    `hostcalls._dispatch` for the component (lifting its arguments, the host function, lowering its
    answer) and around `door._serve` for the science door (reading the request, the same host
    function, writing the answer)."""
    durations: list[float] = []
    if profile_of(runtime) == "science":
        from wasmexec._science import door

        owner: Any = door
        name = "_serve"
    else:
        owner, name = hostcalls, "_dispatch"
    original = getattr(owner, name)

    def timed(*args: Any) -> int:
        started = time.perf_counter()
        try:
            return int(original(*args))
        finally:
            durations.append(time.perf_counter() - started)

    monkeypatch.setattr(owner, name, timed)
    return durations


def _size_text(runtime: Runtime, what: str, size: int) -> str:
    """How the refusal names an oversized argument: its size, or on the science door (which reads only
    the head of a request over its bound) the whole request's, a few bytes more."""
    return f"{what} is {size} bytes" if profile_of(runtime) != "science" else f"{what} is {str(size)[:-2]}"


def _assert_prompt(elapsed: float, host_time: list[float], deadline_ms: int = DEADLINE_MS) -> None:
    """The run ended within its deadline plus `SLACK_S`, and no host call took more than `HOST_CALL_S`."""
    assert elapsed < deadline_ms / 1000 + SLACK_S, f"the run took {elapsed:.2f} s under a {deadline_ms} ms deadline"
    assert host_time, "no host call was timed"
    assert max(host_time) < HOST_CALL_S, f"the host spent {max(host_time):.3f} s on one call"


# -- sizes are checked before any work ---------------------------------------------------------------------


def test_an_8_mb_search_query_is_refused_before_the_search_runs(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = _raw("host.catalog('search_tools', json.dumps({'query': 'sleep echo word ' * 500_000}))")
    result, elapsed = _timed(_sandbox(runtime, broker), code)
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, DEADLINE_MS)
    assert outcome[:2] == ["err", "LIMIT_EXCEEDED"], outcome
    assert "the limit is" in outcome[2] and outcome[3]


def test_a_search_query_under_the_request_cap_but_over_the_query_cap_is_refused(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = "from codemode import discovery\ndiscovery.search_tools('sleep echo word zzyzx ' * 2_000)"
    result, elapsed = _timed(_sandbox(runtime, broker), code)
    _assert_prompt(elapsed, host_time)
    assert error_of(result)["type"] == "CodemodeError"
    assert "the query is 44000 characters" in error_of(result)["message"]


def test_an_80_mb_server_id_is_refused_before_any_lookup(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = _raw("host.start_call(name, 'sleep_for', '{}', host.CallKind.TOOL)", setup="name = 'x' * 80_000_000")
    result, elapsed, peak = _measured(
        _sandbox(runtime, broker), code, Limits(timeout_ms=ROOMY_DEADLINE_MS, memory_mb=512), host_time
    )
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, ROOMY_DEADLINE_MS)
    # Lifting the string out of wasm costs about twice its size; a did-you-mean over it cost 3.6 GB.
    assert peak < 3 * 80_000_000, peak
    assert outcome[:2] == ["err", "INVALID_ARGUMENT"], outcome
    assert _size_text(runtime, "server_id", 80_000_000) in outcome[2]
    assert result["tool_trace"][-1]["server_id"] == "x" * 200


def test_an_80_mb_tool_name_is_refused_before_any_lookup(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = _raw("host.start_call('slow', name, '{}', host.CallKind.TOOL)", setup="name = 'sleep_fo' * 10_000_000")
    result, elapsed, peak = _measured(
        _sandbox(runtime, broker), code, Limits(timeout_ms=ROOMY_DEADLINE_MS, memory_mb=512), host_time
    )
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, ROOMY_DEADLINE_MS)
    assert outcome[:2] == ["err", "INVALID_ARGUMENT"], outcome
    assert peak < 3 * 80_000_000, peak


def test_a_long_name_inside_a_catalog_request_gets_no_did_you_mean_over_it(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = _raw("host.catalog('get_tool', json.dumps({'server_id': 'slow', 'tool_name': 'sleep_fo' * 7_000}))")
    result, elapsed = _timed(_sandbox(runtime, broker), code)
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time)
    assert outcome[:2] == ["err", "NOT_FOUND"], outcome


def test_a_huge_catalog_request_is_refused_before_it_is_decoded(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    # 7 MB of empty lists decodes to about 150 MB of Python objects.
    code = _raw("host.catalog('list_servers', '[' + '[],' * 2_300_000 + '[]]')")
    result, elapsed, peak = _measured(_sandbox(runtime, broker), code, None, host_time)
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, DEADLINE_MS)
    assert outcome[:2] == ["err", "LIMIT_EXCEEDED"], outcome
    assert peak < 40_000_000, peak


def test_a_huge_catalog_operation_name_is_refused_at_once(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = _raw("host.catalog('x' * 20_000_000, '{}')")
    result, elapsed, peak = _measured(
        _sandbox(runtime, broker), code, Limits(timeout_ms=ROOMY_DEADLINE_MS, memory_mb=512), host_time
    )
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, ROOMY_DEADLINE_MS)
    assert outcome[:2] == ["err", "INVALID_ARGUMENT"], outcome
    assert len(outcome[2]) < 300
    assert peak < 3 * 20_000_000, peak


def test_waiting_on_300000_unknown_handles_is_refused_at_once(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = (
        RAW_HOST + "done = host.wait(list(range(1, 300_001)), 0)\n"
        "result = [len(done), sorted({c.outcome.value.kind.name for c in done}), done[0].outcome.value.message]"
    )
    result, elapsed, peak = _measured(_sandbox(runtime, broker), code, Limits(timeout_ms=ROOMY_DEADLINE_MS), host_time)
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, ROOMY_DEADLINE_MS)
    count, kinds, message = outcome
    assert kinds == ["LIMIT_EXCEEDED"] and count <= 300, (count, kinds)
    assert "300000 handles" in message
    assert peak < 60_000_000, peak


def test_waiting_on_unknown_handles_answers_each_once(runtime: Runtime) -> None:
    code = RAW_HOST + "result = [(c.handle, c.outcome.value.kind.name) for c in host.wait([7, 8, 7, 7], 0)]"
    assert data_of(Sandbox(runtime=runtime).run_sync(code)) == [[7, "NOT_FOUND"], [8, "NOT_FOUND"]]


# -- per-run caps ------------------------------------------------------------------------------------------


def test_thousands_of_outstanding_calls_to_a_slow_tool_are_capped(
    runtime: Runtime, own_broker: Broker, host_time: list[float]
) -> None:
    code = (
        RAW_HOST + "started, refused = [], []\n"
        "for _ in range(3_000):\n"
        "    try:\n"
        "        started.append(host.start_call('slow', 'sleep_for', '{\"seconds\": 30}', host.CallKind.TOOL))\n"
        "    except Err as err:\n"
        "        refused.append((err.value.kind.name, err.value.message, err.value.hint))\n"
        "result = [len(started), len(refused), refused[0] if refused else None]"
    )
    limits = Limits(timeout_ms=ROOMY_DEADLINE_MS, max_tool_calls=5_000)
    result, elapsed = _timed(_sandbox(runtime, own_broker), code, limits)
    _assert_prompt(elapsed, host_time, ROOMY_DEADLINE_MS)
    started, refused, first = data_of(result)
    assert started == 128 and refused == 3_000 - 128, (started, refused)
    kind, message, hint = first
    assert kind == "LIMIT_EXCEEDED" and "128 calls" in message and "await" in hint.lower()
    trace = result["tool_trace"]
    assert sum(1 for entry in trace if entry.get("error", "").startswith("limit-exceeded")) == refused
    assert all(not entry["ok"] for entry in trace)


def test_a_refused_start_call_frees_its_slot(runtime: Runtime, broker: Broker) -> None:
    code = (
        RAW_HOST + "kinds = []\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        host.start_call('slow', 'no_such_tool', '{}', host.CallKind.TOOL)\n"
        "    except Err as err:\n"
        "        kinds.append(err.value.kind.name)\n"
        "result = sorted(set(kinds))"
    )
    assert data_of(_sandbox(runtime, broker).run_sync(code, Limits(max_tool_calls=1_000))) == ["NOT_FOUND"]


def test_arguments_that_would_hold_more_than_the_memory_limit_are_refused(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    # 24 x the arguments must pass the limit, which must leave the guest room to build them (the science
    # image alone takes 64.2 MiB), and time to decode them (or the deadline check refuses them first).
    science = profile_of(runtime) == "science"
    memory_mb, pad, deadline_ms = (128, 6_000_000, ROOMY_DEADLINE_MS) if science else (64, 3_000_000, DEADLINE_MS)
    code = _raw(f"host.start_call('slow', 'sleep_for', json.dumps({{'seconds': 0, 'pad': 'x' * {pad}}}), TOOL)")
    result, elapsed = _timed(_sandbox(runtime, broker), code, Limits(timeout_ms=deadline_ms, memory_mb=memory_mb))
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, deadline_ms)
    assert outcome[:2] == ["err", "LIMIT_EXCEEDED"], outcome
    assert "memory limit" in outcome[2]


def test_arguments_that_could_not_be_decoded_before_the_deadline_are_refused(runtime: Runtime, broker: Broker) -> None:
    setup = (
        "started = time.monotonic()\n"
        "payload = json.dumps({'seconds': 0, 'pad': [{}] * 1_300_000})\n"
        "time.sleep(max(0, 2.7 - (time.monotonic() - started)))"
    )
    code = _raw("host.start_call('slow', 'sleep_for', payload, host.CallKind.TOOL)", setup="import time\n" + setup)
    result, elapsed = _timed(_sandbox(runtime, broker), code, Limits(timeout_ms=3_000))
    outcome = data_of(result)
    assert elapsed < 3 + SLACK_S, elapsed  # the guest's sleep is a host call too: time the whole run
    assert outcome[:2] == ["err", "LIMIT_EXCEEDED"], outcome
    assert "before the run's deadline" in outcome[2]


# -- expensive work is bounded -----------------------------------------------------------------------------


def test_a_few_mb_of_arguments_against_a_schema_with_patterns_end_before_the_deadline(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = _raw("host.start_call('patterns', 'check_words', json.dumps({'words': ['A1'] * 1_000_000}), TOOL)")
    result, elapsed, peak = _measured(_sandbox(runtime, broker), code, Limits(timeout_ms=ROOMY_DEADLINE_MS), host_time)
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, ROOMY_DEADLINE_MS)
    assert outcome[0] in ("ok", "err"), outcome
    assert peak < 400_000_000, peak


def test_many_invalid_items_against_a_real_servers_schema_end_before_the_deadline(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    # Before the fix: 100,000 failing items took 23 s to check (every error built and sorted).
    arguments = "json.dumps({'address': {'city': 'x'}, 'points': [{}] * 100_000})"
    code = _raw(f"host.start_call('awkward', 'complex_input', {arguments}, host.CallKind.TOOL)")
    result, elapsed, peak = _measured(_sandbox(runtime, broker), code, Limits(timeout_ms=ROOMY_DEADLINE_MS), host_time)
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time, ROOMY_DEADLINE_MS)
    assert outcome[0] in ("ok", "err"), outcome
    assert peak < 400_000_000, peak


def test_a_backtracking_pattern_in_a_tool_schema_cannot_hang_the_host(
    runtime: Runtime, broker: Broker, host_time: list[float]
) -> None:
    code = _raw("host.start_call('patterns', 'check_word', json.dumps({'word': 'a' * 40 + '!'}), host.CallKind.TOOL)")
    result, elapsed = _timed(_sandbox(runtime, broker), code)
    outcome = data_of(result)
    _assert_prompt(elapsed, host_time)
    assert outcome[0] in ("ok", "err"), outcome


def test_schema_errors_still_name_the_failing_fields(runtime: Runtime, broker: Broker) -> None:
    code = (
        "from codemode.errors import SchemaValidationError\n"
        "import servers.patterns as p\n"
        "try:\n"
        "    await p.check_words(words=['ok', 'A1', 'x'])\n"
        "except SchemaValidationError as exc:\n"
        "    result = sorted(error['pointer'] for error in exc.errors)\n"
    )
    assert data_of(_sandbox(runtime, broker).run_sync(code)) == ["/words/1", "/words/2"]


# -- no exception crosses a wasmtime callback --------------------------------------------------------------


def _runs(runtime: Runtime, code: str, times: int, outcomes: list[Any], errors: list[BaseException]) -> None:
    sandbox = Sandbox(Limits(timeout_ms=20_000), runtime=runtime)
    try:
        for _ in range(times):
            result = sandbox.run_sync(code)
            codes = [entry["code"] for entry in result["diagnostics"]]
            outcomes.append(codes or result["result"].get("data"))
    except BaseException as exc:
        errors.append(exc)


def test_concurrent_blocking_waits_each_end_with_their_own_error(runtime: Runtime) -> None:
    # Before the fix, 4 threads x 25 runs misreported about 7 of them as SANDBOX_TRAP: wasmtime-py
    # parked each run's exception in one process-global slot, and another run's thread took it.
    blocking = "import sys\ndel sys.modules['time']\nimport time\ntime.sleep(2.5)\nresult = 'slept'"
    waits: list[Any] = []
    normal: list[Any] = []
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_runs, args=(runtime, blocking, 25, waits, errors)) for _ in range(4)]
    threads.append(threading.Thread(target=_runs, args=(runtime, "sum(range(1000))", 25, normal, errors)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert waits == [["BLOCKING_WAIT"]] * 100, [codes for codes in waits if codes != ["BLOCKING_WAIT"]]
    assert normal == [499500] * 25
    assert wasmtime_enter.LAST_EXCEPTION is None


class _InterruptingTools(NoTools):
    """A tool host that is interrupted (as by Ctrl-C) while it answers."""

    def catalog(self, run: RunState, op: str, request: Any) -> Any:
        raise KeyboardInterrupt


def test_a_keyboard_interrupt_in_a_host_function_stops_the_run_and_parks_nothing(runtime: Runtime) -> None:
    limits = Limits(timeout_ms=10_000)
    state = RunState(limits=limits, tools=_InterruptingTools(), run_id=uuid.uuid4().hex)
    code = "from codemode import discovery\ndiscovery.list_servers()\nwhile True: pass"
    started = time.monotonic()
    with contextlib.suppress(KeyboardInterrupt):  # the run's owner may re-raise it once the run is over
        result = execute(runtime, code, limits, state.tools, Redactor(), state)[0]
        assert limit_of(result) == "cancelled"
    assert time.monotonic() - started < 5
    assert state.stop_reason == "cancelled" and isinstance(state.interruption, KeyboardInterrupt)
    assert wasmtime_enter.LAST_EXCEPTION is None


class _InterruptedClock(RunState):
    """A run whose deadline check is interrupted (Ctrl-C arrives while the epoch callback runs)."""

    def should_stop(self) -> str | None:
        raise KeyboardInterrupt


def test_a_keyboard_interrupt_in_the_epoch_callback_stops_the_run(runtime: Runtime) -> None:
    limits = Limits(timeout_ms=10_000)
    state = _InterruptedClock(limits=limits, tools=NoTools(), run_id=uuid.uuid4().hex)
    started = time.monotonic()
    with contextlib.suppress(KeyboardInterrupt):
        execute(runtime, "while True: pass", limits, state.tools, Redactor(), state)
    assert time.monotonic() - started < 5
    assert state.stop_reason == "cancelled" and isinstance(state.interruption, KeyboardInterrupt)


class _InterruptingText(str):
    """Text whose encoding is interrupted, as by Ctrl-C landing while wasmtime-py lowers an answer."""

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        raise KeyboardInterrupt


class _InterruptedAnswers(NoTools):
    def start_call(
        self, run: RunState, handle: int, server_id: str, tool_name: str, arguments: Any, *, kind: str = "tool"
    ) -> None:
        run.complete(handle, _InterruptingText('"done"'))


def test_a_keyboard_interrupt_while_an_answer_is_lowered_stops_the_run_and_parks_nothing(runtime: Runtime) -> None:
    limits = Limits(timeout_ms=10_000)
    state = RunState(limits=limits, tools=_InterruptedAnswers(), run_id=uuid.uuid4().hex)
    code = RAW_HOST + "handle = host.start_call('s', 't', '{}', host.CallKind.TOOL)\n"
    code += "host.wait([handle], 1000)"
    with contextlib.suppress(KeyboardInterrupt):
        execute(runtime, code, limits, state.tools, Redactor(), state)
    assert state.stop_reason == "cancelled" and isinstance(state.interruption, KeyboardInterrupt)
    assert wasmtime_enter.LAST_EXCEPTION is None


def test_tool_results_with_lone_surrogates_reach_the_guest_intact(runtime: Runtime) -> None:
    class Surrogates(NoTools):
        def catalog(self, run: RunState, op: str, request: Any) -> Any:
            return ["\ud800", "ok"]

    code = "from codemode import _host\nanswer = _host.catalog('anything', {})\nresult = [len(answer[0]), answer[1]]"
    result = Sandbox(runtime=runtime, tools=Surrogates()).run_sync(code)
    assert data_of(result) == [1, "ok"]
    assert wasmtime_enter.LAST_EXCEPTION is None


def test_host_errors_with_unencodable_text_reach_the_guest(runtime: Runtime) -> None:
    class Unencodable(NoTools):
        def catalog(self, run: RunState, op: str, request: Any) -> Any:
            raise HostCallError("not-found", "no \udcff here", "hint \ud800", what=object())

    result = Sandbox(runtime=runtime, tools=Unencodable()).run_sync(_raw("host.catalog('x', '{}')"))
    assert data_of(result)[:2] == ["err", "NOT_FOUND"]
    assert wasmtime_enter.LAST_EXCEPTION is None


# -- schema validation on the host is bounded (units) -------------------------------------------------------

_WORDS_SCHEMA = _PATTERNS_LISTING["tools"][1]["inputSchema"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("pattern", "prone"),
    [("^(a+)+$", True), ("(a|a)*", True), ("(\\w+\\s?)*$", True), ("[", True),
     ("^[0-9]{5}$", False), ("^[a-z]+$", False), ("^(?:ab)+$", False), ("^\\d{3}-\\d{4}$", False)],
)  # fmt: skip
def test_backtracking_prone_patterns_are_recognised(pattern: str, prone: bool) -> None:
    assert backtracking_prone(pattern) is prone


def test_arguments_needing_more_checks_than_the_budget_are_left_to_the_server() -> None:
    started = time.monotonic()
    assert schema_errors(_WORDS_SCHEMA, {"words": ["ab"] * 1_000_000}) == []
    assert time.monotonic() - started < HOST_CALL_S * 2


def test_a_schema_with_a_backtracking_pattern_is_left_to_the_server() -> None:
    schema = {"type": "object", "properties": {"word": {"type": "string", "pattern": REDOS_PATTERN}}}
    started = time.monotonic()
    assert schema_errors(schema, {"word": "a" * 40 + "!"}) == []
    assert time.monotonic() - started < HOST_CALL_S


def test_patterns_skip_overlong_strings_and_formats_overlong_values() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"},
                                               "b": {"type": "string", "format": "ipv4"}}}  # fmt: skip
    assert [e["pointer"] for e in schema_errors(schema, {"a": "A1", "b": "x"})] == ["/a", "/b"]
    assert schema_errors(schema, {"a": "A" * (MAX_PATTERN_SUBJECT_CHARS + 1), "b": "x" * 5_000}) == []


def test_schema_validation_stops_at_the_runs_deadline() -> None:
    state = RunState(limits=Limits(timeout_ms=1), tools=NoTools(), run_id="r")
    state.started -= 1
    with bound(state), pytest.raises(HostCallError) as caught:
        schema_errors(_WORDS_SCHEMA, {"words": ["ab"] * 5_000})
    assert caught.value.kind == "limit-exceeded" and caught.value.detail == {"limit": "timeout"}


def test_a_failing_value_of_megabytes_is_reported_shortened() -> None:
    errors = schema_errors({"type": "object", "properties": {"a": {"type": "string"}}}, {"a": ["x" * 1_000_000] * 9})
    assert len(errors) == 1 and len(errors[0]["received"]) < 200 and len(errors[0]["message"]) <= 300
