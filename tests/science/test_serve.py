"""A real MCP client against `wasmexec serve --profile default --profile science`: the `profile` argument
picks the image, bad values are protocol errors, discovery and the description list each profile's packages."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters

from tests.helpers import data_of, error_of, free_port, listening
from tests.integration.conftest import child_env
from wasmexec import Limits, Runtime, Sandbox, validate_run_result
from wasmexec._profiles import Profile, profile_of
from wasmexec._science.image import ScienceRuntime


@pytest.fixture(scope="module")
def served(runtime: Runtime, science_runtime: ScienceRuntime, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both images built in one cache directory, and a state directory for sessions."""
    assert runtime.artifacts.directory == science_runtime.artifacts.directory
    return tmp_path_factory.mktemp("serve-profiles")


@pytest.fixture(scope="module")
def science_profile(science_runtime: ScienceRuntime) -> Profile:
    return profile_of(science_runtime)


def _params(runtime: Runtime, state: Path, *options: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "wasmexec", "serve", "--no-audit", "--timeout-ms", "20000", "--profile", "default",
              "--profile", "science", *options],
        env=child_env(WASMEXEC_CACHE_DIR=str(runtime.artifacts.directory), XDG_STATE_HOME=str(state)),
    )  # fmt: skip


def _serve(runtime: Runtime, state: Path, body: Any) -> Any:
    async def main() -> Any:
        with anyio.fail_after(180):
            async with Client(_params(runtime, state)) as client:
                return await body(client)

    return anyio.run(main)


async def _call(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    reply = await client.call_tool("run_python", {"code": code, **arguments})
    assert not reply.is_error, reply
    validate_run_result(reply.structured_content)
    return reply.structured_content  # type: ignore[return-value]


def test_the_tool_takes_a_profile_whose_default_is_the_first_and_the_description_names_the_packages(
    runtime: Runtime, served: Path, science_profile: Profile
) -> None:
    async def body(client: Client) -> Any:
        return (await client.list_tools()).tools

    (tool,) = _serve(runtime, served, body)
    profile = tool.input_schema["properties"]["profile"]
    assert profile["enum"] == ["default", "science"] and profile["default"] == "default"
    versions = {package.name: package.version for package in science_profile.packages}
    for name in ("numpy", "pandas", "scipy", "scikit-learn", "statsmodels", "matplotlib"):
        assert f"{name} {versions[name]}" in tool.description
    assert f"and {len(versions) - 6} more (discovery.packages())" in tool.description


def test_the_profile_argument_routes_each_run_to_its_image(
    runtime: Runtime, science_runtime: ScienceRuntime, served: Path
) -> None:
    code = "import numpy as np\nresult = int(np.arange(10).sum())"

    async def body(client: Client) -> Any:
        return [await _call(client, code, profile="science"), await _call(client, code),
                await _call(client, code, profile="default")]  # fmt: skip

    science, default, explicit = _serve(runtime, served, body)
    assert data_of(science) == 45 and science["sandbox_image"] == science_runtime.sandbox_image
    for result in (default, explicit):
        assert error_of(result)["type"] == "ModuleNotFoundError" and result["sandbox_image"] == runtime.sandbox_image


def test_a_profile_the_server_does_not_offer_is_invalid_params_naming_those_it_does(
    runtime: Runtime, served: Path
) -> None:
    async def body(client: Client) -> Any:
        errors = []
        for value in ("scipy", 3, None):
            with pytest.raises(MCPError) as caught:
                await client.call_tool("run_python", {"code": "result = 1", "profile": value})
            errors.append(caught.value.error)
        return errors

    for error in _serve(runtime, served, body):
        assert error.code == -32602
        assert "'profile' must be one of 'default' and 'science'" in error.message


def test_discovery_lists_the_packages_of_the_profile_the_run_is_in(
    runtime: Runtime, served: Path, science_profile: Profile
) -> None:
    code = "from codemode import discovery\nresult = discovery.packages()"

    async def body(client: Client) -> Any:
        return await _call(client, code), await _call(client, code, profile="science")

    default, science = _serve(runtime, served, body)
    assert data_of(default) == []  # the standard library only
    expected = [{"name": package.name, "version": package.version} for package in science_profile.packages]
    assert data_of(science) == expected  # the guest's metadata agrees with the host's reading of the image
    assert {"name": "pandas", "version": next(p.version for p in science_profile.packages if p.name == "pandas")} in (
        data_of(science)
    )


def test_a_session_is_files_only_so_each_call_picks_its_profile_and_one_without_a_workspace_refuses(
    runtime: Runtime, science_runtime: ScienceRuntime, served: Path
) -> None:
    science_has_files = Sandbox(Limits(), runtime=science_runtime, profile="science").workspaces

    async def body(client: Client) -> Any:
        first = await _call(client, "open('data.csv', 'w').write('a\\n1\\n2\\n')\nresult = 1", session=True)
        session_id = first["session_id"]
        code = "import pandas as pd\nresult = int(pd.read_csv('data.csv')['a'].sum())"
        try:
            return await _call(client, code, profile="science", session_id=session_id)
        except MCPError as exc:
            return exc.error

    outcome = _serve(runtime, served, body)
    if science_has_files:
        assert data_of(outcome) == 3
    else:
        assert outcome.code == -32602
        assert "the science profile has no /workspace on this server" in outcome.message


@pytest.fixture(scope="module")
def http_url(runtime: Runtime, served: Path) -> Iterator[str]:
    params, port = _params(runtime, served), free_port()
    with listening([params.command, *params.args, "--http", "--port", str(port)], port, params.env) as url:
        yield url


def test_health_and_metrics_say_which_profiles_are_ready(
    http_url: str, runtime: Runtime, science_runtime: ScienceRuntime, science_profile: Profile
) -> None:
    base = http_url.removesuffix("/mcp")
    profiles = httpx2.get(f"{base}/healthz", timeout=30).json()["profiles"]
    assert profiles == {
        "default": {"ready": True, "sandbox_image": runtime.sandbox_image, "python": "3.14", "packages": 0},
        "science": {"ready": True, "sandbox_image": science_runtime.sandbox_image, "python": "3.15",
                    "packages": len(science_profile.packages)},
    }  # fmt: skip

    async def run() -> None:
        with anyio.fail_after(120):
            async with Client(http_url) as client:
                await _call(client, "result = 1", profile="science")

    anyio.run(run)
    metrics = httpx2.get(f"{base}/metrics", timeout=30).text
    assert 'wasmexec_profile_ready{profile="default"} 1.0' in metrics
    assert 'wasmexec_profile_ready{profile="science"} 1.0' in metrics
    assert 'wasmexec_profile_runs_total{profile="science"} 1.0' in metrics
