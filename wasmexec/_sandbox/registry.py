"""The registry of guest images: a profile name → its image plug-in (`wasmexec._sandbox.image.Image`).

The only place outside an image's own folder that names a profile: the CLI, the server,
`Sandbox(profile=...)` and the description ask it, and never compare profile names. An
image's module is imported only when its profile is asked for (the science image is an
optional extra, and the default path should not load it). Adding a profile: its folder,
and one line here.
"""

from __future__ import annotations

import importlib
import threading
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


#: Packages with compiled code a built-in image already carries (a user profile cannot add them): its profile.
CARRIED = {name: "science" for name in ("numpy", "pandas", "scipy", "scikit-learn", "statsmodels", "matplotlib")}


def is_built_in(name: str) -> bool:
    """Whether `name` is a built-in profile (else it may be a user profile, `wasmexec._userprofile`)."""
    return name in _IMAGES


def check_profile(name: str) -> str:
    """`name` if it is a built-in profile or could name a user profile; ValueError saying why not otherwise
    (whether a user profile of that name is built is known when its runtime is made)."""
    if name in _IMAGES:
        return name
    problem: str | None = _user("profile_store").name_problem(name, PROFILES)
    if problem is not None:
        raise ValueError(f"unknown profile {name[:64]!r}; the profiles are {', '.join(PROFILES)} and your own "
                         f"(wasmexec build --profile NAME --requirements FILE): {problem}")  # fmt: skip
    return name


def runtime(
    profile: str, cache_dir: Path | str | None = None, progress: Progress | None = None, pooling: Pooling | None = None
) -> ImageRuntime[Any]:
    """A new runtime of `profile`'s image on `cache_dir` (None: the per-user cache dir), on the pooling
    allocator with `pooling` (`wasmexec._sandbox.pooling`); a ValueError listing the profiles when there is
    none of that name."""
    if not is_built_in(check_profile(profile)):
        user: ImageRuntime[Any] = _user("user_image").UserRuntime(profile, cache_dir, progress, pooling=pooling)
        return user
    module, runtime_class, _ = _IMAGES[profile]
    runtime_type = getattr(importlib.import_module(module), runtime_class)
    made: ImageRuntime[Any] = runtime_type(cache_dir, progress, pooling=pooling)
    return made


_user_defaults: dict[str, ImageRuntime[Any]] = {}
_user_defaults_lock = threading.Lock()


def default_runtime(profile: str) -> ImageRuntime[Any]:
    """The process's shared runtime of `profile`'s image on the default cache directory."""
    if not is_built_in(check_profile(profile)):
        with _user_defaults_lock:
            if profile not in _user_defaults:
                _user_defaults[profile] = runtime(profile)
            return _user_defaults[profile]
    module, _, getter = _IMAGES[profile]
    made: ImageRuntime[Any] = getattr(importlib.import_module(module), getter)()
    return made


def cache_files(profile: str, directory: Path | None = None) -> CacheFiles:
    """What `profile`'s image leaves in a cache directory (a user profile's: in `directory`), and which of
    those files this install uses."""
    if not is_built_in(check_profile(profile)):
        user_files: CacheFiles = _user("user_image").cache_files(directory or Path("."), profile)
        return user_files
    module, _, _ = _IMAGES[profile]
    files: CacheFiles = importlib.import_module(module).cache_files()
    return files


def user_profiles(directory: Path) -> list[str]:
    """The user profiles built in `directory`."""
    return [name for name in _user("profile_store").names(directory) if not is_built_in(name)]


def _user(module: str) -> Any:
    """A module of the user profiles (imported by name, like the images: it imports this registry)."""
    return importlib.import_module(f"wasmexec._userprofile.{module}")
