"""A user profile's fresh run against its base image's, and what importing its packages costs (issue 18 §2).

Run from the repository root with the project's venv, the default image built::

    .venv/bin/python benchmarks/bench_profiles.py            # 30 rounds, about a minute
    .venv/bin/python benchmarks/bench_profiles.py --rounds 8

It writes two pure-Python wheels with the standard library (``tiny``: one module; ``bulky``: 40 modules of
100 functions, about 8,000 lines), builds a user profile on the default image from them in a temporary cache
dir (the base image hard-linked in, never rebuilt), and times, interleaved round by round (A B C D, ...),
``Sandbox(spares=0).run_sync`` (a fresh instance each run, the default limits) of: the default image running
``result = 1``; the profile running the same; the profile importing ``tiny``; the profile importing ``bulky``
(bytecode compiled at build time). Each case's wasm instructions come from one metered run (fuel counts
them; they do not depend on the machine's load). Prints medians, the 25th percentile and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.wheels import linked_cache, make_wheel  # noqa: E402
from wasmexec import Limits, Runtime, Sandbox  # noqa: E402
from wasmexec._userprofile.profile_build import build_profile  # noqa: E402

BULKY_MODULES = 40
FUNCTIONS_PER_MODULE = 100


def _bulky_files() -> dict[str, str | bytes]:
    imports = "".join(f"from . import m{i}\n" for i in range(BULKY_MODULES))
    files: dict[str, str | bytes] = {"bulky/__init__.py": imports}
    for module in range(BULKY_MODULES):
        files[f"bulky/m{module}.py"] = "".join(
            f"def f{n}(x, y=1):\n    return [x * y + {n} for _ in range(2)]\n\n" for n in range(FUNCTIONS_PER_MODULE)
        )
    return files


def _profile(work: Path, base: Runtime) -> Any:
    wheels = work / "wheels"
    make_wheel(wheels, "tiny", "1.0", {"tiny.py": "def hello(name):\n    return f'hello {name}'\n"})
    make_wheel(wheels, "bulky", "1.0", _bulky_files())
    requirements = work / "requirements.txt"
    requirements.write_text("tiny\nbulky\n")
    cache = linked_cache(base.artifacts.directory, base.sandbox_image, work / "cache")
    return build_profile("bench", requirements, find_links=wheels, cache_dir=cache)


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(f"load average at start: {_load()}", flush=True)
    base = Runtime()
    with tempfile.TemporaryDirectory() as temporary:
        user = _profile(Path(temporary), base)
        cases = {
            "default image, `result = 1`": (base, "result = 1"),
            "user profile, `result = 1` (imports nothing)": (user, "result = 1"),
            "user profile, `import tiny` (one module)": (user, "import tiny\nresult = tiny.hello('x')"),
            "user profile, `import bulky` (8,000 lines, bytecode)": (user, "import bulky\nresult = 1"),
        }
        fresh = {name: Sandbox(runtime=runtime, spares=0) for name, (runtime, _) in cases.items()}
        budget = Limits(fuel=10**12)
        metered = {name: Sandbox(budget, runtime=runtime, spares=0) for name, (runtime, _) in cases.items()}
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for name, (_, code) in cases.items():  # warm-up: compiled images loaded, caches warm
            assert fresh[name].run_sync(code)["result"]["ok"]
        for round_ in range(args.rounds):
            order = list(cases) if round_ % 2 == 0 else list(reversed(cases))
            for name in order:
                started = time.perf_counter()
                result = fresh[name].run_sync(cases[name][1])
                samples[name].append((time.perf_counter() - started) * 1000)
                assert result["result"]["ok"], result
        print(f"load average at end: {_load()}; {args.rounds} rounds; cpus: {os.cpu_count()}\n")
        print("| case | p50 (ms) | p25 (ms) | wasm instructions |")
        print("| --- | ---: | ---: | ---: |")
        for name, (_, code) in cases.items():
            used = metered[name].run_sync(code)["result"]["metrics"]["fuel_used"]
            ordered = sorted(samples[name])
            p25 = ordered[len(ordered) // 4]
            print(f"| {name} | {statistics.median(ordered):.2f} | {p25:.2f} | {used:,} |")


if __name__ == "__main__":
    main()
