"""Who is calling: the key that binds artifacts, sessions and paused runs to the client that made them.

One rule for all three (so a client can never reach another's state through any of them):

- an authenticated principal (HTTP with auth configured): that principal, in any protocol era;
- 2025-era streamable HTTP: the MCP session (the ``Mcp-Session-Id`` the server minted);
- stdio: the one client at the other end of the pipe;
- otherwise (2026-era HTTP without auth, which has no sessions): nobody in particular. The
  caller is `None`: an unguessable id (a run id in a resource URI, a session id, a resume
  token) is then the capability itself, and nothing is listed to such a caller.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import principal_components

#: The key of the only client a stdio server has.
STDIO_CALLER = "stdio"


def caller_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The caller of this request (see the module docstring); None when no one can be told apart."""
    token = get_access_token()
    if token is not None:
        client_id, issuer, subject = principal_components(token)
        return "principal:" + _digest(f"{client_id}\0{issuer or ''}\0{subject or ''}")
    request = ctx.request
    if request is None:
        return STDIO_CALLER
    headers = getattr(request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    if session and not ctx.protocol_version.startswith("2026"):
        return "mcp-session:" + _digest(session)
    return None


def _digest(text: str) -> str:
    """Keys are kept (in memory, in session directories): never the raw session id or principal."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
