"""Errors raised by wasmexec on the host.

Agent code failing is never an exception here: it comes back as a run result
with ``result.ok = false``. These errors mean the host side itself cannot work::

    WasmexecError
    ├── BuildError      the guest component could not be built, compiled or loaded
    ├── ConfigError     the MCP server configuration file is unusable
    └── SandboxError    wasmtime failed outside of the guest's control

Foreign errors (wasmtime, OS, subprocess) are translated where they happen and
chained with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = ["BuildError", "ConfigError", "SandboxError", "WasmexecError"]


class WasmexecError(Exception):
    """Base class of every error raised by wasmexec."""


class BuildError(WasmexecError):
    """The guest component could not be built, compiled, cached or loaded."""


class SandboxError(WasmexecError):
    """wasmtime failed in a way that is not the guest code's doing."""


class ConfigError(WasmexecError):
    """The MCP server configuration file is missing, unreadable or malformed."""
