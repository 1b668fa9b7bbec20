"""Without API keys the API is reachable from this machine only, by its loopback names.

``--no-auth`` (``api.auth = false``) trusts whoever can connect. Listening on
loopback keeps other machines out; checking the ``Host`` header keeps web pages
out too: a page on ``evil.example`` can rebind its name to 127.0.0.1 (DNS
rebinding) and have the browser call the API, but the browser still sends
``Host: evil.example``. So with auth off, a request whose Host is not
``localhost``, a loopback IP literal or ``[::1]`` (any port) is answered 421.
With auth on every Host is served: keys, not names, protect the API there, and a
reverse proxy may present any public name.

Loopback keeps other machines out, not other users of this one (nor a session uid that
escaped its sandbox): without keys ``create_app`` also wraps the app in
:class:`onebox.peers.OperatorPeerOnly`, which serves only connections from the server's uid.
"""

from __future__ import annotations

import ipaddress

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from onebox.api.errors import body
from onebox.config import Settings
from onebox.errors import ConfigError

LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback_address(host: str) -> bool:
    """``localhost`` or a loopback IP literal (brackets allowed around IPv6)."""
    host = host.lower().rstrip(".")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The name in a Host header, without its port (``[::1]:8420`` -> ``[::1]``)."""
    if header.startswith("["):
        return header.partition("]")[0] + "]"
    name, _, port = header.rpartition(":")
    return name if name and port.isdigit() else header


def check_no_auth_binding(settings: Settings) -> None:
    """Refuse to serve without keys on an address other machines can reach."""
    if not settings.api.auth and not is_loopback_address(settings.api.host):
        raise ConfigError(
            f"api.auth is off but api.host is {settings.api.host}: without API keys the API "
            "must listen on loopback only. Listen on 127.0.0.1 (ONEBOX_API__HOST), or turn "
            "auth on and create keys with `onebox keys create`.", field="api.host")


class LoopbackHostOnly:
    """With ``api.auth`` off, answer 421 to requests addressed to a non-loopback Host."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = scope_header(scope, b"host")
        if scope["type"] == "lifespan" or self.settings.api.auth \
                or is_loopback_address(host_of(host)):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        response = JSONResponse(body(
            "misdirected_request",
            f"Host {host[:100]!r} is not served: with --no-auth only localhost, 127.0.0.1 and "
            "[::1] are (a web page could otherwise reach this API through DNS rebinding). Open "
            "the API as http://localhost:PORT, or turn auth on.", "Host"), status_code=421)
        await response(scope, receive, send)


def scope_header(scope: Scope, name: bytes) -> str:
    """A request header's value (latin-1), or ''."""
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return ""
