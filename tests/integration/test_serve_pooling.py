"""`wasmexec serve --pooling SLOTS`: the server's sandboxes run on wasmtime's pooling allocator (a real server
over stdio, a real `mcp` client); the option's mistakes are usage errors."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests.helpers import data_of
from tests.integration.conftest import child_env
from tests.integration.test_serve_profiles import _serve
from wasmexec import Runtime


def test_a_pooled_server_runs_code_in_fresh_sandboxes(runtime: Runtime) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--no-audit", "--pooling", "16", "--pooling-keep-resident-mb", "4"],
        env=child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory)),
    )

    async def main() -> list[Any]:
        with anyio.fail_after(120):
            async with Client(params) as client:
                first = "import builtins\nbuiltins.leftover = 1\nresult = 6 * 7"
                second = "import builtins\nresult = hasattr(builtins, 'leftover')"
                return [(await client.call_tool("run_python", {"code": code})).structured_content
                        for code in (first, second)]  # fmt: skip

    first, second = anyio.run(main)
    assert data_of(first) == 42
    assert data_of(second) is False


def test_keeping_memory_resident_without_a_pool_is_a_usage_error(tmp_path: Path) -> None:
    done = _serve("--pooling-keep-resident-mb", "4", cache=tmp_path)
    assert done.returncode == 2
    assert "--pooling-keep-resident-mb needs --pooling SLOTS" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_pool_smaller_than_the_concurrent_runs_is_a_usage_error(tmp_path: Path) -> None:
    done = _serve("--pooling", "4", "--max-concurrent-runs", "8", cache=tmp_path)
    assert done.returncode == 2
    assert "--pooling 4 is fewer than --max-concurrent-runs 8" in done.stderr


def test_a_pool_of_no_slots_is_a_usage_error(tmp_path: Path) -> None:
    done = _serve("--pooling", "0", cache=tmp_path)
    assert done.returncode == 2
    assert "must be at least 1" in done.stderr


def test_the_serve_options_give_the_runtimes_their_pool() -> None:
    from wasmexec._cli.main import build_parser
    from wasmexec._cli.options import runtime_from_args
    from wasmexec._sandbox.pooling import Pooling

    args = build_parser().parse_args(["serve", "--pooling", "16", "--pooling-keep-resident-mb", "4"])
    assert runtime_from_args(args, "default").pooling == Pooling(16, 4)
    assert runtime_from_args(build_parser().parse_args(["serve"]), "default").pooling is None
