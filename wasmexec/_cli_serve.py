"""`wasmexec serve`: wires the runtime, broker, policy and audit log into the MCP server."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

import anyio


def command_serve(args: argparse.Namespace) -> int:
    from wasmexec._cli import _limits, _runtime, load_policy_options, load_servers, open_audit, open_broker
    from wasmexec._hostcalls import NoTools
    from wasmexec._redact import Redactor
    from wasmexec._sandbox import Sandbox
    from wasmexec._server import RunPythonServer, ServeOptions

    limits, config, policy, audit = _limits(args), load_servers(args), load_policy_options(args), open_audit(args)
    runtime = _runtime(args)
    runtime.prepare(limits.fuel is not None)  # build or load now: the first call should not wait for it
    broker = open_broker(args, config, policy, audit) if config is not None and config.servers else None
    try:
        if broker is not None:
            broker.open()
        sandbox = Sandbox(limits, runtime=runtime, tools=broker if broker is not None else NoTools(),
                          redactor=broker.redactor if broker is not None else Redactor(), audit=audit)  # fmt: skip
        server = RunPythonServer(sandbox, ServeOptions(limits=limits), broker)
        if args.http:
            _serve_http(server, args.host, args.port)
        else:
            anyio.run(_serve_stdio, server)
    finally:
        if broker is not None:
            broker.close()
    return 0


async def _serve_stdio(server: Any) -> None:
    from mcp import stdio_server

    lowlevel = server.lowlevel()
    async with anyio.create_task_group() as group:
        group.start_soon(_stop_on_signal, group.cancel_scope)
        async with stdio_server() as (read, write):
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
        group.cancel_scope.cancel()  # stdin closed: the client is gone


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            print("wasmexec: stopping (signal)", file=sys.stderr)
            scope.cancel()
            return


def _serve_http(server: Any, host: str, port: int) -> None:
    import uvicorn

    print(f"wasmexec: serving run_python at http://{host}:{port}/mcp", file=sys.stderr)
    uvicorn.run(server.lowlevel().streamable_http_app(), host=host, port=port, log_level="warning")
