"""`codemode.llm.ask` through the Python API: a real component and a sampler callable.

The MCP route (a real client's sampling callback, both eras) is in test_serve_sampling.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tests.helpers import data_of, error_of
from wasmexec import Limits, Runtime, Sandbox
from wasmexec._audit import AuditLog, digest
from wasmexec._redact import Redactor
from wasmexec._runctx.llm_ask import MAX_PROMPT_BYTES, TRACE_SERVER_ID, TRACE_TOOL_NAME, estimate_tokens


class Model:
    """A stand-in model: answers `reply(request)` and keeps every request it was sent."""

    def __init__(self, reply: Any = None) -> None:
        self.reply = reply if reply is not None else (lambda request: "answer to " + request["prompt"])
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Any:
        with self._lock:
            self.requests.append(request)
        return self.reply(request)


def _sandbox(runtime: Runtime, tmp_path: Path, **limits: int) -> Sandbox:
    redactor = Redactor()
    redactor.add_secret("hunter2-very-secret")
    return Sandbox(Limits(timeout_ms=20_000, **limits), runtime=runtime, redactor=redactor,
                   audit=AuditLog(tmp_path / "audit.jsonl"))  # fmt: skip


def _sampling_lines(tmp_path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    return [line for line in lines if line["kind"] == "sampling"]


def test_ask_returns_the_samplers_answer_traced_and_audited_with_digests_only(runtime: Runtime, tmp_path: Path) -> None:
    model = Model()
    code = "from codemode import llm\nresult = await llm.ask('what is 2+2?', system='Be terse.', max_tokens=20)"
    result = _sandbox(runtime, tmp_path).run_sync(code, sampler=model)
    assert data_of(result) == "answer to what is 2+2?"
    assert model.requests == [{"prompt": "what is 2+2?", "system": "Be terse.", "max_tokens": 20}]
    (entry,) = result["tool_trace"]
    assert (entry["server_id"], entry["tool_name"], entry["ok"]) == (TRACE_SERVER_ID, TRACE_TOOL_NAME, True)
    (line,) = _sampling_lines(tmp_path)
    assert line["prompt_digest"] == digest("what is 2+2?") and line["response_digest"] == digest(data_of(result))
    assert line["outcome"] == "ok" and line["tokens"] == estimate_tokens(data_of(result)) and line["tokens_estimated"]
    text = (tmp_path / "audit.jsonl").read_text()
    assert "2+2" not in text and "answer to" not in text and "terse" not in text


def test_secrets_are_redacted_from_the_prompt_before_it_leaves(runtime: Runtime, tmp_path: Path) -> None:
    model = Model(lambda request: "ok")
    code = "from codemode import llm\nawait llm.ask('password: hunter2-very-secret', system='x hunter2-very-secret')"
    data_of(_sandbox(runtime, tmp_path).run_sync(code, sampler=model))
    (request,) = model.requests
    assert "hunter2" not in request["prompt"] and "[REDACTED]" in request["prompt"]
    assert "hunter2" not in request["system"]
    assert _sampling_lines(tmp_path)[0]["redactions"] == 2


def test_without_a_sampler_ask_raises_sampling_unavailable_with_a_hint(runtime: Runtime, tmp_path: Path) -> None:
    code = """
from codemode import llm
from codemode.errors import SamplingUnavailableError
try:
    await llm.ask("hi")
except SamplingUnavailableError as exc:
    result = [str(exc), exc.hint, exc.retryable]
"""
    result = _sandbox(runtime, tmp_path).run_sync(code)
    message, hint, retryable = data_of(result)
    assert "no model" in message and "wasmexec serve" in hint and retryable is False
    assert result["tool_trace"][0]["ok"] is False and _sampling_lines(tmp_path)[0]["outcome"] == "unavailable"


def test_uncaught_unavailable_sampling_is_the_runs_error(runtime: Runtime, tmp_path: Path) -> None:
    result = _sandbox(runtime, tmp_path).run_sync("from codemode import llm\nawait llm.ask('hi')")
    assert error_of(result)["type"] == "SamplingUnavailableError"


def test_the_call_cap_stops_the_next_call_with_a_sandbox_limit(runtime: Runtime, tmp_path: Path) -> None:
    code = """
from codemode import llm
answers = [await llm.ask("q") for _ in range(2)]
await llm.ask("one too many")
"""
    result = _sandbox(runtime, tmp_path, max_llm_calls=2).run_sync(code, sampler=Model(lambda r: "a"))
    error = error_of(result)
    assert error["type"] == "SandboxLimitError" and "limit of 2" in error["message"]
    assert [d.get("limit") for d in result["diagnostics"] if d["code"] == "SANDBOX_LIMIT"] == ["llm_calls"]
    assert [line["outcome"] for line in _sampling_lines(tmp_path)] == ["ok", "ok", "over_cap"]


def test_max_tokens_sent_is_what_is_left_of_the_token_budget(runtime: Runtime, tmp_path: Path) -> None:
    model = Model(lambda request: {"text": "x", "tokens": 70, "model": "m"})  # the sampler counts its tokens
    code = """
from codemode import llm
from codemode.errors import SandboxLimitError
await llm.ask("a", max_tokens=500)
await llm.ask("b", max_tokens=500)
try:
    await llm.ask("c")
except SandboxLimitError as exc:
    result = exc.detail["limit"]
"""
    result = _sandbox(runtime, tmp_path, max_llm_tokens=100).run_sync(code, sampler=model)
    assert data_of(result) == "llm_tokens"
    assert [request["max_tokens"] for request in model.requests] == [100, 30]


def test_gathered_asks_run_concurrently(runtime: Runtime, tmp_path: Path) -> None:
    both = threading.Barrier(2, timeout=10)

    def reply(request: dict[str, Any]) -> str:
        both.wait()  # only returns when both calls are in flight at once
        return request["prompt"].upper()

    code = """
import asyncio
from codemode import llm
result = await asyncio.gather(llm.ask("one"), llm.ask("two"))
"""
    assert data_of(_sandbox(runtime, tmp_path).run_sync(code, sampler=Model(reply))) == ["ONE", "TWO"]


def test_untrusted_answers_are_checked(runtime: Runtime, tmp_path: Path) -> None:
    code = """
from codemode import llm
from codemode.errors import CodemodeError
result = []
for _ in range(3):
    try:
        result.append(await llm.ask("q", max_tokens=1))
    except CodemodeError as exc:
        result.append(type(exc).__name__ + ": " + str(exc))
"""
    answers = iter(["\ud800 lone surrogate", "y" * 5000, {"text": ["not", "text"]}])
    result = _sandbox(runtime, tmp_path).run_sync(code, sampler=Model(lambda request: next(answers)))
    surrogate, long, not_text = data_of(result)
    assert surrogate.startswith("ToolCallError") and "Unicode" in surrogate
    assert long.startswith("ToolCallError") and "5000 bytes" in long
    assert not_text.startswith("ToolCallError") and "not text" in not_text


def test_oversized_prompts_and_bad_max_tokens_are_refused_before_any_work(runtime: Runtime, tmp_path: Path) -> None:
    model = Model()
    code = f"""
from codemode import llm
from codemode.errors import CodemodeError
result = []
for prompt, max_tokens in (("p" * {MAX_PROMPT_BYTES + 1}, 5), ("p", 10**6)):
    try:
        await llm.ask(prompt, max_tokens=max_tokens)
    except CodemodeError as exc:
        result.append(type(exc).__name__ + ": " + str(exc))
"""
    too_big, too_many = data_of(_sandbox(runtime, tmp_path).run_sync(code, sampler=model))
    assert too_big.startswith("SandboxLimitError") and f"{MAX_PROMPT_BYTES + 1} bytes" in too_big
    assert "max_tokens must be between 1 and" in too_many
    assert model.requests == []


def test_a_failing_sampler_fails_only_that_call(runtime: Runtime, tmp_path: Path) -> None:
    def reply(request: dict[str, Any]) -> str:
        raise RuntimeError("model overloaded")

    code = """
from codemode import llm
from codemode.errors import ToolCallError
try:
    await llm.ask("q")
except ToolCallError as exc:
    result = [str(exc), exc.retryable]
"""
    message, retryable = data_of(_sandbox(runtime, tmp_path).run_sync(code, sampler=Model(reply)))
    assert "model overloaded" in message and retryable is True


def test_the_sampling_metric_counts_each_call_by_outcome(runtime: Runtime, tmp_path: Path) -> None:
    from wasmexec._server.admission import Admission
    from wasmexec._server.metrics import RunMetrics

    code = """
from codemode import llm
from codemode.errors import CodemodeError
for _ in range(3):
    try:
        await llm.ask("q")
    except CodemodeError:
        pass
"""
    sandbox = _sandbox(runtime, tmp_path, max_llm_calls=2)
    metrics = RunMetrics(Admission())
    metrics.observe_run(sandbox.run_sync(code, sampler=Model(lambda request: "a")))
    metrics.observe_run(sandbox.run_sync("from codemode import llm\nawait llm.ask('q')"))  # no sampler
    value = metrics.registry.get_sample_value
    assert value("wasmexec_sampling_calls_total", {"outcome": "ok"}) == 2
    assert value("wasmexec_sampling_calls_total", {"outcome": "over_cap"}) == 1
    assert value("wasmexec_sampling_calls_total", {"outcome": "unavailable"}) == 1
    assert value("wasmexec_tool_calls_total", {"server": "other", "outcome": "ok"}) is None  # not a tool's call
