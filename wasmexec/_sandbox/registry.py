"""The registry of guest images: a profile name → its image plug-in (`wasmexec._sandbox.image.Image`).

The only place outside an image's own folder that names a profile: the CLI, the server,
`Sandbox(profile=...)` and the description ask it, and never compare profile names. An
image's module is imported only when its profile is asked for (the science image is an
optional extra, and the default path should not load it). Adding a profile: its folder,
and one line here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wasmexec._sandbox.image import CacheFiles
    from wasmexec._sandbox.image_cache import Progress
    from wasmexec._sandbox.pooling import Pooling
    from wasmexec._sandbox.runtime import ImageRuntime

#: Each profile's image: the module, its runtime class, and its process-default getter (its module also
#: has ``cache_files()``: what it leaves in a cache directory).
_IMAGES = {
    "default": ("wasmexec._sandbox.runtime", "Runtime", "default_runtime"),
    "science": ("wasmexec._science.image", "ScienceRuntime", "default_science_runtime"),
}
#: The guest images a Sandbox can run: the default one, and numpy/pandas (``pip install "wasmexec[science]"``).
PROFILES = tuple(_IMAGES)
DEFAULT_PROFILE = "default"


def check_profile(name: str) -> str:
    """`name` if it is a profile; ValueError naming the profiles otherwise."""
    if name not in _IMAGES:
        raise ValueError(f"unknown profile {name!r}; the profiles are {', '.join(PROFILES)}")
    return name


def runtime(
    profile: str, cache_dir: Path | str | None = None, progress: Progress | None = None, pooling: Pooling | None = None
) -> ImageRuntime[Any]:
    """A new runtime of `profile`'s image on `cache_dir` (None: the per-user cache dir), on the pooling
    allocator with `pooling` (`wasmexec._sandbox.pooling`)."""
    module, runtime_class, _ = _IMAGES[check_profile(profile)]
    runtime_type = getattr(importlib.import_module(module), runtime_class)
    made: ImageRuntime[Any] = runtime_type(cache_dir, progress, pooling=pooling)
    return made


def default_runtime(profile: str) -> ImageRuntime[Any]:
    """The process's shared runtime of `profile`'s image on the default cache directory."""
    module, _, getter = _IMAGES[check_profile(profile)]
    made: ImageRuntime[Any] = getattr(importlib.import_module(module), getter)()
    return made


def cache_files(profile: str) -> CacheFiles:
    """What `profile`'s image leaves in a cache directory, and which of those files this install uses."""
    module, _, _ = _IMAGES[check_profile(profile)]
    files: CacheFiles = importlib.import_module(module).cache_files()
    return files
