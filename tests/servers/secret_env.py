"""secret_env: a server that reads its own environment, to test secrets given to servers.

* `show_env(name)` returns `os.environ.get(name)`: the value as one text block and as structured output
  `{"result": value}`; when the variable is not set, no content block and `{"result": null}`.
  Configure a secret for the server (for stdio, `StdioServerParameters(env={...})`; besides that the mcp
  SDK passes a child only HOME, LOGNAME, PATH, SHELL, TERM and USER), call `show_env` for it, and check
  that the secret reached the server but is redacted from what a sandboxed caller gets back.
* `show_env_error(name)` returns the same value inside an `isError` result (text
  `"Error executing tool show_env_error: failed: NAME=value"`), to check that redaction also covers error text.

    python tests/servers/secret_env.py                  # stdio
    python tests/servers/secret_env.py --http 8765      # streamable HTTP (reads the environment it was started with)
"""

from __future__ import annotations

import os

from _serve import serve
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

mcp = MCPServer("secret_env", version="1.0.0", instructions="Test server: shows its environment.", log_level="WARNING")


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True))
def show_env(name: str) -> str | None:
    """Return the value of environment variable `name`, or null when it is not set."""
    return os.environ.get(name)


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def show_env_error(name: str) -> str:
    """Fail with an error message that contains the value of environment variable `name`."""
    raise ToolError(f"failed: {name}={os.environ.get(name)}")


if __name__ == "__main__":
    serve(mcp)
