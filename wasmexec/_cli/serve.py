"""`wasmexec serve`: wires the runtime, broker, policy and audit log into the MCP server."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

import anyio


def command_serve(args: argparse.Namespace) -> int:
    from wasmexec._cli.main import (
        limits_from_args,
        load_policy_options,
        load_servers,
        open_audit,
        open_broker,
        runtime_from_args,
    )
    from wasmexec._redact import Redactor
    from wasmexec._sandbox.sandbox import Sandbox
    from wasmexec._server.server import RunPythonServer, ServeOptions
    from wasmexec._toolhost import NoTools

    limits, config, policy, audit = (
        limits_from_args(args),
        load_servers(args),
        load_policy_options(args),
        open_audit(args),
    )
    runtime = runtime_from_args(args)
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
            _interrupt_on_sigterm()
            anyio.run(_serve_stdio, server)
    finally:
        if broker is not None:
            broker.close()  # stops the servers it started
        if _terminated:
            # Idle anyio worker threads of the interrupted loop would keep the interpreter alive.
            sys.stderr.flush()
            os._exit(128 + signal.SIGTERM)
    return 0


_terminated = False


async def _serve_stdio(server: Any) -> None:
    from mcp import stdio_server

    lowlevel = server.lowlevel()
    async with stdio_server() as (read, write):  # returns when stdin closes: the client is gone
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def _interrupt_on_sigterm() -> None:
    """SIGTERM stops the server like Ctrl-C: the stdin reader is a thread no cancellation reaches."""

    def interrupt(signum: int, frame: Any) -> None:
        global _terminated
        _terminated = True
        print("wasmexec: stopping (SIGTERM)", file=sys.stderr)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _serve_http(server: Any, host: str, port: int) -> None:
    import uvicorn

    print(f"wasmexec: serving run_python at http://{host}:{port}/mcp", file=sys.stderr)
    uvicorn.run(server.lowlevel().streamable_http_app(), host=host, port=port, log_level="warning")
