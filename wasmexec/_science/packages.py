"""What the science image offers a run, as users and models see it: its packages and its description.

The packages are read from the metadata inside its stdlib zip (the file the guest imports
them from), never written here. Nothing here imports wasmtime.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from wasmexec._profiles import Package, Profile
from wasmexec._science import upstream

#: The packages the science profile is for (the issue's list): named, with their versions, in the tool description.
SCIENCE_FEATURED = ("numpy", "pandas", "scipy", "scikit-learn", "statsmodels", "matplotlib")
#: The tool description's first paragraph when the science profile is the default one offered.
SCIENCE_INTRO = (
    "Run Python {python} in a fresh WebAssembly sandbox and call MCP tools from it, with "
    "{packages} (discovery.packages() lists them) and the standard library; matplotlib draws with Agg "
    "(savefig to io.BytesIO); numpy's default int is int32; no network, processes or threads."
)


@cache
def science_profile(stdlib_zip: Path) -> Profile:
    """The science profile whose guest imports from `stdlib_zip` (read once per process)."""
    packages = tuple(Package(name, version) for name, version in upstream.distributions(stdlib_zip))
    summary = f"Python {upstream.PYTHON_VERSION} with {', '.join(SCIENCE_FEATURED)} and more"
    return Profile("science", upstream.PYTHON_VERSION, summary, packages, SCIENCE_FEATURED, SCIENCE_INTRO)
