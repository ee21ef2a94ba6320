"""Your own packages as a profile: built from local wheels (no network), run under real wasmtime.

Each build goes into a cache dir of its own that holds the default image as hard links of the
session's (`tests.wheels.linked_cache`), so no test rebuilds the base.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import data_of
from tests.integration.conftest import child_env
from tests.wheels import linked_cache, make_wheel
from wasmexec import BuildError, Limits, Runtime, Sandbox
from wasmexec._userprofile import profile_store
from wasmexec._userprofile.profile_build import build_profile
from wasmexec._userprofile.wheels import download, stub_provided

GREET = {"greet/__init__.py": "from helper import PREFIX\n\ndef hello(name):\n    return f'{PREFIX} {name}'\n"}


@pytest.fixture
def cache(runtime: Runtime, tmp_path: Path) -> Path:
    return linked_cache(runtime.artifacts.directory, runtime.sandbox_image, tmp_path / "cache")


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    directory = tmp_path / "wheels"
    make_wheel(directory, "greet", "1.0", GREET, requires=["helper>=1"])
    make_wheel(directory, "helper", "1.2", {"helper.py": "PREFIX = 'hello'\n"})
    return directory


def requirements(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    return path


def run(runtime: Any, code: str, fuel: int | None = None) -> dict[str, Any]:
    return dict(Sandbox(Limits(timeout_ms=20_000, fuel=fuel), runtime=runtime, spares=0).run_sync(code))


def test_a_profile_with_a_pure_python_package_builds_and_runs_it(tmp_path: Path, cache: Path, wheels: Path,
                                                                  runtime: Runtime) -> None:  # fmt: skip
    user = build_profile("greeter", requirements(tmp_path, "greet\n"), find_links=wheels, cache_dir=cache)
    code = "import greet\nfrom codemode import discovery\nresult = [greet.hello('you'), discovery.packages()]"
    result = run(user, code)
    assert data_of(result) == ["hello you", [{"name": "greet", "version": "1.0"},
                                             {"name": "helper", "version": "1.2"}]]  # fmt: skip
    assert result["sandbox_image"] == user.sandbox_image != runtime.sandbox_image
    assert data_of(run(Sandbox(profile="greeter", cache_dir=cache).runtime, "import greet\nresult = 1")) == 1


def test_the_lock_pins_every_wheel_by_its_hash(tmp_path: Path, cache: Path, wheels: Path) -> None:
    build_profile("pinned", requirements(tmp_path, "greet\n"), find_links=wheels, cache_dir=cache)
    lines = [line for line in (cache / "profile-pinned.lock").read_text().splitlines() if not line.startswith("#")]
    expected = [f"{name}=={version} --hash=sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
                for name, version, path in (("greet", "1.0", next(wheels.glob("greet-*"))),
                                            ("helper", "1.2", next(wheels.glob("helper-*"))))]  # fmt: skip
    assert lines == expected


def test_a_wheel_that_differs_from_its_lock_is_refused(tmp_path: Path, cache: Path, wheels: Path) -> None:
    needs = requirements(tmp_path, "greet\n")
    build_profile("tampered", needs, find_links=wheels, cache_dir=cache)
    make_wheel(wheels, "greet", "1.0", {"greet/__init__.py": "import os\nhello = os.getcwd\n"}, requires=["helper"])
    with pytest.raises(BuildError, match=r"greet 1\.0: .*does not match the hash pinned"):
        build_profile("tampered", needs, find_links=wheels, cache_dir=cache)


def test_a_changed_requirements_file_changes_the_identity(tmp_path: Path, cache: Path, wheels: Path) -> None:
    first = build_profile("changing", requirements(tmp_path, "helper\n"), find_links=wheels, cache_dir=cache)
    second = build_profile("changing", requirements(tmp_path, "greet\n"), find_links=wheels, cache_dir=cache)
    assert first.sandbox_image != second.sandbox_image
    assert data_of(run(second, "import greet\nresult = greet.hello('x')")) == "hello x"


def test_a_package_with_compiled_code_is_refused_with_its_name(tmp_path: Path, cache: Path, wheels: Path) -> None:
    make_wheel(wheels, "fastpath", "2.0", {"fastpath/__init__.py": "", "fastpath/_speed.so": b"\x7fELF"},
               tag="cp311-cp311-linux_x86_64")  # fmt: skip
    with pytest.raises(BuildError, match=r"fastpath: no pure-Python wheel.*fastpath-2\.0-cp311-cp311-linux_x86_64"):
        build_profile("compiled", requirements(tmp_path, "fastpath\n"), find_links=wheels, cache_dir=cache)


def test_numpy_is_refused_with_the_profile_that_has_it(tmp_path: Path, cache: Path, wheels: Path) -> None:
    make_wheel(wheels, "numpy", "2.3.0", {"numpy/__init__.py": ""}, tag="cp311-cp311-linux_x86_64")
    with pytest.raises(BuildError, match=r"numpy: .*the science profile already has numpy \(--base science\)"):
        build_profile("numeric", requirements(tmp_path, "numpy\n"), find_links=wheels, cache_dir=cache)


def test_a_pure_tagged_wheel_that_holds_native_code_is_refused(tmp_path: Path, cache: Path, wheels: Path) -> None:
    make_wheel(wheels, "sneaky", "1.0", {"sneaky/__init__.py": "", "sneaky/_x.cpython-311-x86_64-linux-gnu.so": b""})
    with pytest.raises(BuildError, match=r"sneaky 1\.0: .* holds native code"):
        build_profile("sneaky", requirements(tmp_path, "sneaky\n"), find_links=wheels, cache_dir=cache)


@pytest.mark.parametrize("name", ["default", "science", "Upper", "../x", "a b", "x" * 40])
def test_a_bad_or_built_in_profile_name_is_refused(tmp_path: Path, wheels: Path, name: str) -> None:
    with pytest.raises(ValueError, match="cannot build a profile named"):
        build_profile(name, requirements(tmp_path, "greet\n"), find_links=wheels, cache_dir=tmp_path)


def test_a_missing_requirements_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read the requirements file .*missing\.txt"):
        build_profile("mine", tmp_path / "missing.txt", cache_dir=tmp_path)


def test_an_unresolvable_requirement_names_it(tmp_path: Path, cache: Path, wheels: Path) -> None:
    with pytest.raises(BuildError, match="no-such-package: no pure-Python wheel"):
        build_profile("missing", requirements(tmp_path, "no-such-package\n"), find_links=wheels, cache_dir=cache)


def test_without_a_network_the_error_says_to_use_find_links(tmp_path: Path, cache: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens: refused at once
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with pytest.raises(BuildError, match=r"cannot reach the package index.*--find-links"):
        build_profile("offline", requirements(tmp_path, "wasmexec-test-nothing\n"), cache_dir=cache)


def test_an_unknown_profile_lists_the_profiles_and_how_to_build_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown profile 'mine'; the profiles are default, science.*"
                                         r"wasmexec build --profile mine --requirements FILE"):  # fmt: skip
        Sandbox(profile="mine", cache_dir=tmp_path)


def cli(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``wasmexec ARGS`` on cache dir `cache`."""
    env = {**os.environ, "WASMEXEC_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "wasmexec", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)  # fmt: skip


def test_the_cli_builds_runs_and_lists_a_profile(tmp_path: Path, cache: Path, wheels: Path) -> None:
    def wasmexec(*args: str) -> subprocess.CompletedProcess[str]:
        return cli(cache, *args)

    built = wasmexec("build", "--profile", "cli", "--requirements", str(requirements(tmp_path, "greet\n")),
                     "--find-links", str(wheels))  # fmt: skip
    assert built.returncode == 0, built.stderr
    ran = wasmexec("run", "--profile", "cli", "-c", "import greet\nresult = greet.hello('cli')")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["result"]["data"] == "hello cli"
    listed = wasmexec("cache")
    assert "cli profile (yours)" in listed.stdout
    unknown = wasmexec("run", "--profile", "nothere", "-c", "1")
    assert unknown.returncode == 2 and "wasmexec build --profile nothere --requirements FILE" in unknown.stderr


#: A module big enough that compiling it costs far more than loading its bytecode.
BULKY = {"bulky/__init__.py": "".join(f"def f{i}(x):\n    return [x + {i}, {{'k': x * {i}}}]\n\n" for i in range(300))}


def test_the_packages_are_imported_from_bytecode_compiled_at_build_time(tmp_path: Path, cache: Path,
                                                                        wheels: Path) -> None:  # fmt: skip
    make_wheel(wheels, "bulky", "1.0", BULKY)
    user = build_profile("bytecode", requirements(tmp_path, "bulky\n"), find_links=wheels, cache_dir=cache)
    code = (
        "import importlib.util, os, sys, bulky\ncached = bulky.__spec__.cached\nresult = [cached == "
        "importlib.util.cache_from_source(bulky.__file__), os.path.isfile(cached), sys.implementation.cache_tag]"
    )
    same, present, tag = data_of(run(user, code))
    assert same and present
    pyc = user.image.stored.tree / "bulky" / "__pycache__" / f"__init__.{tag}.pyc"
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01  # hash-based, source never checked (PEP 552)
    budget = 10**12  # metered (fuel is off by default) to count the instructions each import costs
    from_bytecode = run(user, "import bulky", budget)["result"]["metrics"]["fuel_used"]
    from_source = run(user, "import sys\nsys.implementation.cache_tag = None\nimport bulky", budget)["result"][
        "metrics"
    ]["fuel_used"]
    assert from_bytecode * 3 < from_source, (from_bytecode, from_source)


@pytest.mark.parametrize("suffix", [".py", ".pyc"])
def test_a_profile_whose_files_another_user_could_change_is_refused(tmp_path: Path, cache: Path, wheels: Path,
                                                                    suffix: str) -> None:  # fmt: skip
    user = build_profile("opened", requirements(tmp_path, "greet\n"), find_links=wheels, cache_dir=cache)
    opened = next(path for path in user.image.stored.tree.rglob(f"__init__*{suffix}"))
    os.chmod(opened, 0o666)
    with pytest.raises(BuildError, match=rf"profile opened: .*__init__.*\{suffix} is writable by other users.*"
                                         r"wasmexec build --profile opened --requirements FILE"):  # fmt: skip
        Sandbox(profile="opened", cache_dir=cache)


@pytest.mark.parametrize("planted", ["open-directory", "file", "symlink"])
def test_a_rebuild_replaces_an_untrusted_package_tree_under_the_same_name(
    tmp_path: Path, cache: Path, wheels: Path, planted: str
) -> None:
    needs = requirements(tmp_path, "greet\n")
    tree = build_profile("replaced", needs, find_links=wheels, cache_dir=cache).image.stored.tree
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("kept")
    if planted == "open-directory":
        os.chmod(tree, 0o777)
        (tree / "greet" / "__init__.py").chmod(0o666)
        (tree / "greet" / "__init__.py").write_text("def hello(name):\n    return 'planted'\n")
    else:
        subprocess.run(["rm", "-rf", str(tree)], check=True)
        if planted == "file":
            tree.write_text("planted")
        else:
            tree.symlink_to(elsewhere)
    rebuilt = build_profile("replaced", needs, find_links=wheels, cache_dir=cache)
    assert rebuilt.image.stored.tree == tree and tree.is_dir() and not tree.is_symlink()
    assert data_of(run(rebuilt, "import greet\nresult = greet.hello('x')")) == "hello x"
    assert (elsewhere / "keep.txt").read_text() == "kept" and not list(cache.glob(".profile-*"))


def test_a_profile_is_used_only_on_the_base_image_it_was_built_on(tmp_path: Path, cache: Path, wheels: Path) -> None:
    stored = build_profile("moved", requirements(tmp_path, "greet\n"), find_links=wheels, cache_dir=cache).image.stored
    record = json.loads((cache / "profile-moved.json").read_text())
    record["base_image"] = "sha256:" + "0" * 64  # as if built by another wasmexec, whose default image differs
    (cache / "profile-moved.json").write_text(json.dumps(record))
    stored.tree.rename(cache / f"profile-moved-{profile_store.identity(record['base_image'], stored.lock)[7:39]}")
    with pytest.raises(BuildError, match=r"profile moved was built on another default image .*"
                                         r"wasmexec build --profile moved --requirements FILE"):  # fmt: skip
        Sandbox(profile="moved", cache_dir=cache)


def test_build_output_ships_a_profile_with_its_base_image(tmp_path: Path, cache: Path, wheels: Path) -> None:
    shipped = tmp_path / "shipped"
    built = cli(cache, "build", "--profile", "shipped", "--requirements", str(requirements(tmp_path, "greet\n")),
                "--find-links", str(wheels), "--output", str(shipped))  # fmt: skip
    assert built.returncode == 0, built.stderr
    before = sorted(path.relative_to(shipped) for path in shipped.rglob("*"))
    assert any(path.name == "profile-shipped.lock" for path in before)
    assert any(path.suffix == ".pyc" for path in before) and any(path.suffix == ".cwasm" for path in before)
    ran = cli(tmp_path / "unused", "run", "--profile", "shipped", "--cache-dir", str(shipped), "-c",
              "import greet\nresult = greet.hello('shipped')")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["result"]["data"] == "hello shipped"
    assert sorted(path.relative_to(shipped) for path in shipped.rglob("*")) == before  # run from it as it is


def test_serve_offers_a_profile_to_a_real_mcp_client(tmp_path: Path, cache: Path, wheels: Path) -> None:
    build_profile("served", requirements(tmp_path, "greet\n"), find_links=wheels, cache_dir=cache)
    params = StdioServerParameters(command=sys.executable, args=["-m", "wasmexec", "serve", "--no-audit",
                                   "--profile", "served"], env=child_env(WASMEXEC_CACHE_DIR=str(cache)))  # fmt: skip
    code = "import greet\nfrom codemode import discovery\nresult = [greet.hello('mcp'), discovery.packages()]"

    async def main() -> tuple[str, Any]:
        with anyio.fail_after(120):
            async with Client(params) as client:
                tools = await client.list_tools()
                reply = await client.call_tool("run_python", {"code": code})
                assert not reply.is_error, reply
                return tools.tools[0].description or "", reply.structured_content

    description, result = anyio.run(main)
    assert "greet" in description
    assert data_of(result) == ["hello mcp", [{"name": "greet", "version": "1.0"},
                                             {"name": "helper", "version": "1.2"}]]  # fmt: skip


def test_a_dependency_the_base_image_has_is_left_to_the_base(tmp_path: Path, wheels: Path) -> None:
    make_wheel(wheels, "numplot", "1.0", {"numplot/__init__.py": "import numpy\n"}, requires=["numpy>=2"])
    provided = stub_provided([("numpy", "2.3.0")], tmp_path / "provided")  # as the science image has it
    for attempt, needs in enumerate(("numplot\n", "numplot\nnumpy>=3\n")):
        dest = tmp_path / f"dest{attempt}"
        dest.mkdir()
        if attempt == 0:
            found = download(requirements(tmp_path, needs), "3.15", dest, wheels, False, {}, provided)
            assert [wheel.name for wheel in found] == ["numplot"]
        else:  # the base's version is the only one there is
            with pytest.raises(BuildError, match="numpy"):
                download(requirements(tmp_path, needs), "3.15", dest, wheels, False, {}, provided)
