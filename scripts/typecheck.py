"""Type-checks the host (`wasmexec/`) and the guest (`bridge/`) with `mypy --strict`, as CI does.

The guest imports modules that exist only inside the component (`wit_world`,
`componentize_py_types`). This script first generates their typed bindings from the
WIT world (`wasm_assets/wit`) into `typings/` (gitignored), every time, so they can
never drift from the contract; then it runs mypy with the config in pyproject.toml,
which reads them through `mypy_path`.

Usage: python scripts/typecheck.py [extra mypy arguments]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIT_DIR = ROOT / "wasm_assets" / "wit"
#: The WIT world the guest implements (`world sandbox` in world.wit).
WORLD = "sandbox"
#: Where the generated bindings go; pyproject's `[tool.mypy] mypy_path` names it.
BINDINGS_DIR = ROOT / "typings"

# The componentize-py CLI of the running interpreter's environment (as wasmexec builds the guest).
_COMPONENTIZE_PY = "import sys, componentize_py; sys.argv[0] = 'componentize-py'; sys.exit(componentize_py.script())"


def generate_bindings() -> None:
    """Writes fresh bindings of the WIT world into `typings/`."""
    shutil.rmtree(BINDINGS_DIR, ignore_errors=True)
    command = [sys.executable, "-c", _COMPONENTIZE_PY, "-q", "-d", str(WIT_DIR), "-w", WORLD, "bindings"]
    subprocess.run([*command, str(BINDINGS_DIR)], check=True)


def main(argv: list[str]) -> int:
    """Generates the bindings, then runs mypy over both trees; returns mypy's exit code."""
    try:
        generate_bindings()
    except subprocess.CalledProcessError as exc:
        print(f"typecheck: componentize-py could not generate the WIT bindings (exit {exc.returncode})")
        return 2
    return subprocess.run([sys.executable, "-m", "mypy", *argv], cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
