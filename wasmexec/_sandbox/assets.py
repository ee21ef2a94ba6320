"""Where the guest's sources live, and their content hash.

In a wheel, `bridge/` and `wasm_assets/` are packaged as ``wasmexec/_guest/``; in
a source checkout they sit beside the package.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # wasmexec/

#: The WIT world the guest implements (wasm_assets/wit/world.wit).
WORLD = "sandbox"
#: The componentize-py app module in bridge/.
APP_MODULE = "app"


@dataclass(frozen=True)
class GuestSources:
    bridge_dir: Path
    wit_dir: Path

    def files(self) -> list[tuple[str, Path]]:
        """Every file that goes into the component as (stable name, path), sorted."""
        found = [
            (f"{label}/{path.relative_to(root).as_posix()}", path)
            for label, root in (("bridge", self.bridge_dir), ("wit", self.wit_dir))
            for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".wit")
        ]
        return sorted(found)

    def source_hash(self, builder_version: str) -> str:
        """sha256 over the sources and the builder version: the build cache key."""
        digest = hashlib.sha256(builder_version.encode())
        for name, path in self.files():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()


@cache
def guest_sources() -> GuestSources:
    """Locates bridge/ and wasm_assets/wit/ (wheel layout first, then the checkout)."""
    for base in (_PACKAGE_DIR / "_guest", _PACKAGE_DIR.parent):
        bridge, wit = base / "bridge", base / "wasm_assets" / "wit"
        if (bridge / f"{APP_MODULE}.py").is_file() and (wit / "world.wit").is_file():
            return GuestSources(bridge, wit)
    raise FileNotFoundError(f"the guest sources (bridge/, wasm_assets/) are missing next to {_PACKAGE_DIR}")
