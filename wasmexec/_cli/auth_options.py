"""The authentication options of `wasmexec serve --http` (`wasmexec._server.auth`), and the loopback rule.

Without ``--auth-token-file`` or ``--auth-issuer``, anyone who reaches the port can run code
as the server's user, so ``--http`` serves only on a loopback address unless
``--allow-unauthenticated`` says that is meant (and the start says so on stderr).
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import TYPE_CHECKING, Any

from wasmexec._cli.options import UsageError

if TYPE_CHECKING:
    from wasmexec._server.auth import Authenticator


def add_auth_options(serve: argparse.ArgumentParser) -> None:
    auth = serve.add_argument_group(
        "authentication (with --http)",
        "Requests to /mcp need 'Authorization: Bearer TOKEN'; /healthz and /metrics stay open for probes. "
        "Without these options --http serves on loopback only.",
    )
    auth.add_argument("--auth-token-file", metavar="FILE",
                      help="tokens, one 'PRINCIPAL TOKEN' line each (# comments); readable by its owner only; "
                      "tokens of 32 characters or more, e.g. `openssl rand -hex 32`")  # fmt: skip
    auth.add_argument("--auth-issuer", metavar="URL",
                      help="accept JWT access tokens of this OAuth 2.1 issuer (its keys are found from its "
                      "metadata); needs --auth-audience")  # fmt: skip
    auth.add_argument("--auth-audience", metavar="AUD",
                      help="the audience ('aud') those tokens must carry: usually this server's URL, "
                      "e.g. https://mcp.example.com/mcp")  # fmt: skip
    auth.add_argument("--auth-resource", metavar="URL",
                      help="this server's URL as clients reach it, for the protected-resource metadata "
                      "(default: --auth-audience, when that is a URL)")  # fmt: skip
    auth.add_argument("--allow-unauthenticated", action="store_true",
                      help="serve --http on a non-loopback --host without authentication (anyone who reaches "
                      "the port runs code)")  # fmt: skip


def authenticator_from_args(args: argparse.Namespace) -> Authenticator | None:
    """The authenticator the options ask for (None: none), after the checks; UsageError/ConfigError (exit 2) else."""
    token_file, issuer, audience, resource = args.auth_token_file, args.auth_issuer, args.auth_audience, \
        args.auth_resource  # fmt: skip
    wanted = any(value is not None for value in (token_file, issuer, audience, resource))
    if not args.http:
        if wanted or args.allow_unauthenticated:
            raise UsageError("--auth-* and --allow-unauthenticated apply to --http only (stdio needs no token)")
        return None
    if wanted and args.allow_unauthenticated:
        raise UsageError("--allow-unauthenticated contradicts the --auth-* options given: leave it out")
    if (issuer is None) != (audience is None):
        raise UsageError("--auth-issuer and --auth-audience go together: tokens are checked for both")
    if resource is not None and issuer is None:
        raise UsageError("--auth-resource applies to --auth-issuer (the OAuth mode) only")
    if not wanted:
        if not args.allow_unauthenticated and not is_loopback(args.host):
            raise UsageError(f"--host {args.host} would serve beyond this machine without authentication: give "
                             "--auth-token-file FILE, or --auth-issuer URL --auth-audience AUD; or "
                             "--allow-unauthenticated to serve anyway (anyone who reaches the port runs "
                             "code)")  # fmt: skip
        return None
    return _authenticator(token_file, issuer, audience, resource)


def _authenticator(
    token_file: str | None, issuer: str | None, audience: str | None, resource: str | None
) -> Authenticator:
    from wasmexec._server.auth import Authenticator
    from wasmexec._server.jwt_auth import JwtVerifier, check_issuer_url
    from wasmexec._server.tokenfile import TokenFileVerifier

    verifiers: list[Any] = []
    if token_file is not None:
        verifiers.append(TokenFileVerifier.load(token_file))
    jwt = None
    if issuer is not None and audience is not None:
        if resource is None and not audience.startswith(("https://", "http://")):
            raise UsageError(f"--auth-audience {audience!r} is not a URL: give --auth-resource URL, this server's "
                             "URL as clients reach it (e.g. https://mcp.example.com/mcp)")  # fmt: skip
        resource = check_issuer_url(resource or audience, "--auth-resource")
        jwt = JwtVerifier(issuer, audience)
        verifiers.append(jwt)
    return Authenticator(verifiers, jwt=jwt, resource=resource)


def announce(authenticator: Authenticator | None, allow_unauthenticated: bool) -> None:
    """Says at start-up how requests are authenticated (stderr)."""
    if authenticator is not None:
        print(f"wasmexec: bearer tokens required ({authenticator.describe()}); /healthz and /metrics are open",
              file=sys.stderr)  # fmt: skip
    elif allow_unauthenticated:
        print("wasmexec: warning: serving without authentication (--allow-unauthenticated): anyone who reaches "
              "the port can run code", file=sys.stderr)  # fmt: skip


def is_loopback(host: str) -> bool:
    """Whether `host` (a --host value) is this machine only: a loopback address, or a name resolving only to them."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    import socket

    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(addresses) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses)
