"""wasmexec: run untrusted Python in a WebAssembly sandbox and let it call MCP tools.

    from wasmexec import Limits, Sandbox

    with Sandbox(Limits(timeout_ms=5_000)) as sandbox:
        result = sandbox.run_sync("result = sum(range(10))")
    print(result["result"])   # {'ok': True, 'data': 45, 'metrics': {...}}

With MCP tools: ``with Broker(load_config("mcp.json")) as broker:`` then
``Sandbox(tools=broker, redactor=broker.redactor)``.

Names are imported on first use, so ``wasmexec run`` starts without loading what a
plain run does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from wasmexec._version import __version__

if TYPE_CHECKING:
    from wasmexec._audit import AuditLog
    from wasmexec._envelope import RunResult, run_result_json_schema, validate_run_result
    from wasmexec._exceptions import BuildError, ConfigError, SandboxError, WasmexecError
    from wasmexec._limits import Limits
    from wasmexec._redact import Redactor
    from wasmexec._sandbox.pooling import Pooling
    from wasmexec._sandbox.runtime import Runtime
    from wasmexec._sandbox.sandbox import RunControl, Sandbox
    from wasmexec._tools.broker import Broker
    from wasmexec._tools.config import Config, ServerConfig, load_config, parse_config
    from wasmexec._tools.policy import Policy, load_policy
    from wasmexec._workspace.store import ArtifactStore

__all__ = [
    "ArtifactStore",
    "AuditLog",
    "Broker",
    "BuildError",
    "Config",
    "ConfigError",
    "Limits",
    "Policy",
    "Pooling",
    "Redactor",
    "RunControl",
    "RunResult",
    "Runtime",
    "Sandbox",
    "SandboxError",
    "ServerConfig",
    "WasmexecError",
    "__version__",
    "load_config",
    "load_policy",
    "parse_config",
    "run_result_json_schema",
    "validate_run_result",
]

_HOMES = {
    "ArtifactStore": "_workspace.store",
    "AuditLog": "_audit",
    "Broker": "_tools.broker",
    "Config": "_tools.config",
    "ConfigError": "_exceptions",
    "Policy": "_tools.policy",
    "Pooling": "_sandbox.pooling",
    "RunControl": "_sandbox.sandbox",
    "ServerConfig": "_tools.config",
    "load_config": "_tools.config",
    "load_policy": "_tools.policy",
    "parse_config": "_tools.config",
    "BuildError": "_exceptions",
    "Limits": "_limits",
    "Redactor": "_redact",
    "RunResult": "_envelope",
    "Runtime": "_sandbox.runtime",
    "Sandbox": "_sandbox.sandbox",
    "SandboxError": "_exceptions",
    "WasmexecError": "_exceptions",
    "run_result_json_schema": "_envelope",
    "validate_run_result": "_envelope",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'wasmexec' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"wasmexec.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
