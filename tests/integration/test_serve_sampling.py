"""`codemode.llm.ask` through `wasmexec serve`: a real `mcp` client with a sampling callback, and with none.

Both protocol eras: ``legacy`` (2025: sampling/createMessage over the session) and ``auto``
(2026-07-28: an InputRequiredResult that the client answers by retrying the call).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import CreateMessageRequestParams, CreateMessageResult, ImageContent, TextContent

from tests.helpers import data_of, error_of, free_port, listening
from tests.integration.conftest import child_env
from wasmexec import Runtime

MODES = ["legacy", "auto"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, runtime: Runtime) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("serve-sampling")
    return {"audit": tmp / "audit.jsonl", "cache": runtime.artifacts.directory}


def _params(setup: dict[str, Path]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--audit-log", str(setup["audit"]), "--timeout-ms", "20000",
              "--max-llm-calls", "3", "--max-llm-tokens", "1000"],
        env=child_env(WASMEXEC_CACHE_DIR=str(setup["cache"])),
    )  # fmt: skip


class Model:
    """The client's sampling callback: answers with text (or `content`) and keeps what it was asked."""

    def __init__(self, content: Any = None) -> None:
        self.content = content
        self.asked: list[CreateMessageRequestParams] = []

    async def __call__(self, ctx: Any, params: CreateMessageRequestParams) -> CreateMessageResult:
        self.asked.append(params)
        prompt = params.messages[0].content
        text = f"echo: {prompt.text}" if isinstance(prompt, TextContent) else "?"
        return CreateMessageResult(role="assistant", content=self.content or TextContent(type="text", text=text),
                                   model="test-model")  # fmt: skip


def _call(setup: dict[str, Path], mode: str, arguments: dict[str, Any], **client_options: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            async with Client(_params(setup), mode=mode, **client_options) as client:  # type: ignore[arg-type]
                return (await client.call_tool("run_python", arguments)).structured_content

    return anyio.run(main)


ASK = """
from codemode import llm
result = await llm.ask("What is 6 * 7?", system="Answer with a number.", max_tokens=50)
"""


@pytest.mark.parametrize("mode", MODES)
def test_ask_reaches_the_clients_model_and_its_answer_the_run(setup: dict[str, Path], mode: str) -> None:
    model = Model()
    result = _call(setup, mode, {"code": ASK}, sampling_callback=model)
    assert data_of(result) == "echo: What is 6 * 7?"
    (asked,) = model.asked
    assert asked.system_prompt == "Answer with a number." and asked.max_tokens == 50
    assert [entry["tool_name"] for entry in result["tool_trace"]] == ["llm.ask"]
    lines = [json.loads(line) for line in setup["audit"].read_text().splitlines()]
    sampling = [line for line in lines if line["kind"] == "sampling" and line["run_id"] == result["run_id"]]
    assert len(sampling) == 1 and sampling[0]["outcome"] == "ok" and sampling[0]["prompt_digest"].startswith("sha256:")
    assert "6 * 7" not in setup["audit"].read_text()


@pytest.mark.parametrize("mode", MODES)
def test_without_a_sampling_callback_ask_raises_sampling_unavailable(setup: dict[str, Path], mode: str) -> None:
    code = """
from codemode import llm
from codemode.errors import SamplingUnavailableError
try:
    await llm.ask("hi")
except SamplingUnavailableError as exc:
    result = [str(exc), exc.hint]
"""
    message, hint = data_of(_call(setup, mode, {"code": code}))
    assert message == "this client does not support sampling" and "sampling capability" in hint


@pytest.mark.parametrize("mode", MODES)
def test_gathered_asks_all_get_their_answers(setup: dict[str, Path], mode: str) -> None:
    code = """
import asyncio
from codemode import llm
result = await asyncio.gather(*(llm.ask(f"q{i}", max_tokens=10) for i in range(3)))
"""
    model = Model()
    assert data_of(_call(setup, mode, {"code": code}, sampling_callback=model)) == ["echo: q0", "echo: q1", "echo: q2"]
    assert len(model.asked) == 3


def test_in_the_2025_era_gathered_asks_reach_the_client_at_once(setup: dict[str, Path]) -> None:
    code = """
import asyncio
from codemode import llm
result = await asyncio.gather(*(llm.ask(f"q{i}", max_tokens=10) for i in range(3)))
"""
    arrived: list[str] = []
    all_here = anyio.Event()

    async def together(ctx: Any, params: CreateMessageRequestParams) -> CreateMessageResult:
        arrived.append(params.messages[0].content.text)  # type: ignore[union-attr]
        if len(arrived) == 3:
            all_here.set()
        with anyio.fail_after(30):  # only answers once all three are in flight at the client
            await all_here.wait()
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="ok"), model="m")

    assert data_of(_call(setup, "legacy", {"code": code}, sampling_callback=together)) == ["ok", "ok", "ok"]


def test_the_operators_call_cap_holds_and_a_client_may_lower_it(setup: dict[str, Path]) -> None:
    code = "from codemode import llm\nfor i in range(4):\n    await llm.ask('q')"
    over = _call(setup, "auto", {"code": code}, sampling_callback=Model())
    assert error_of(over)["type"] == "SandboxLimitError"
    assert [e["ok"] for e in over["tool_trace"]] == [True, True, True, False]
    lowered = _call(setup, "auto", {"code": code, "max_llm_calls": 1}, sampling_callback=Model())
    assert [e["ok"] for e in lowered["tool_trace"]] == [True, False]


def test_the_token_budget_lowers_max_tokens_and_a_client_may_lower_it(setup: dict[str, Path]) -> None:
    model = Model()
    code = "from codemode import llm\nresult = await llm.ask('q', max_tokens=500)"
    data_of(_call(setup, "legacy", {"code": code, "max_llm_tokens": 200}, sampling_callback=model))
    assert model.asked[0].max_tokens == 200


def test_a_client_cannot_raise_the_llm_caps(setup: dict[str, Path]) -> None:
    async def main() -> list[int]:
        codes = []
        async with Client(_params(setup), mode="auto") as client:
            for arguments in ({"max_llm_calls": 4}, {"max_llm_tokens": 1001}):
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("run_python", {"code": "1", **arguments})
                codes.append(caught.value.code)
                assert "at most" in str(caught.value)
        return codes

    assert anyio.run(main) == [-32602, -32602]


@pytest.mark.parametrize("mode", MODES)
def test_an_image_answer_is_refused_with_a_clear_error(setup: dict[str, Path], mode: str) -> None:
    code = """
from codemode import llm
from codemode.errors import ToolCallError
try:
    await llm.ask("draw")
except ToolCallError as exc:
    result = str(exc)
"""
    image = ImageContent(type="image", data="aGk=", mime_type="image/png")
    assert "image content, not text" in data_of(_call(setup, mode, {"code": code}, sampling_callback=Model(image)))


def test_the_cli_has_no_model(setup: dict[str, Path]) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "wasmexec", "run", "-c", "from codemode import llm\nawait llm.ask('hi')"],
        capture_output=True, text=True, timeout=120, env=child_env(WASMEXEC_CACHE_DIR=str(setup["cache"])),
    )  # fmt: skip
    result = json.loads(completed.stdout)
    error = error_of(result)
    assert error["type"] == "SamplingUnavailableError" and "CLI has no model" in json.dumps(result["diagnostics"])


@pytest.mark.parametrize("mode", MODES)
def test_metrics_over_http_count_sampling_calls_by_outcome(setup: dict[str, Path], mode: str) -> None:
    code = """
from codemode import llm
from codemode.errors import SandboxLimitError
await llm.ask("q")
try:
    await llm.ask("q", max_tokens=10)
except SandboxLimitError:
    pass
"""
    params, port = _params(setup), free_port()
    with listening([params.command, *params.args, "--http", "--port", str(port)], port, params.env) as url:

        async def main() -> Any:
            with anyio.fail_after(120):
                async with Client(url, mode=mode, sampling_callback=Model()) as client:  # type: ignore[arg-type]
                    return (await client.call_tool("run_python", {"code": code, "max_llm_calls": 1})).structured_content

        data_of(anyio.run(main))
        metrics = httpx2.get(url.removesuffix("/mcp") + "/metrics", timeout=30).text
    samples = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line.startswith("wasmexec_sampling_calls_"))
    assert float(samples['wasmexec_sampling_calls_total{outcome="ok"}']) == 1
    assert float(samples['wasmexec_sampling_calls_total{outcome="over_cap"}']) == 1
