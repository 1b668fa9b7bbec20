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
escaped its sandbox). So without keys :class:`OperatorPeerOnly` also serves a connection only
when the socket at its other end belongs to the server's own effective uid: the kernel's
table of TCP sockets (``/proc/net/tcp``, ``/proc/net/tcp6``) names the owner (``uid``) of the
socket whose local address is the client's and whose remote address is the server's. Any
other uid, or a peer the table does not show (another network namespace), is answered 403.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import pwd
import sys

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
        host = _header(scope, b"host")
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


Endpoint = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _endpoint(field: str) -> Endpoint:
    """``0100007F:1F90`` -> (127.0.0.1, 8080): the kernel prints each 32-bit word of the
    address in host byte order (IPv4-mapped IPv6 addresses are given as IPv4)."""
    hex_addr, _, hex_port = field.partition(":")
    raw = bytes.fromhex(hex_addr)
    little = sys.byteorder == "little"
    words = b"".join(raw[i:i + 4][::-1] if little else raw[i:i + 4]
                     for i in range(0, len(raw), 4))
    addr = ipaddress.ip_address(words)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr, int(hex_port, 16)


def _normal(host: str, port: int) -> Endpoint:
    addr = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr, port


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the TCP socket at ``client`` connected to ``server`` (None: not found,
    e.g. the peer is in another network namespace)."""
    wanted = (_normal(*client), _normal(*server))
    for table in TCP_TABLES:
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)
                for line in fh:
                    cols = line.split()
                    if len(cols) > 7 and (_endpoint(cols[1]), _endpoint(cols[2])) == wanted:
                        return int(cols[7])
        except FileNotFoundError:
            continue
    return None


def operator_uid() -> tuple[int, str]:
    """The server's effective uid and its user name, as the start banner says them."""
    uid = os.geteuid()
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, "no name"


def no_auth_banner() -> str:
    uid, name = operator_uid()
    return (f"no-auth: only connections from uid {uid} ({name}) are accepted; any other local "
            "user gets 403 (create API keys to serve others)")


class OperatorPeerOnly:
    """Without API keys, serve only connections made by the server's own uid (see above)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.settings.api.auth or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        client, server = scope.get("client"), scope.get("server")
        uid = None
        if client and server:
            uid = await asyncio.to_thread(peer_uid, tuple(client), tuple(server))
        if uid is not None and uid == os.geteuid():
            await self.app(scope, receive, send)
            return
        await _refuse_peer(scope, receive, send, uid)


async def _refuse_peer(scope: Scope, receive: Receive, send: Send, uid: int | None) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    me, name = operator_uid()
    who = f"uid {uid}" if uid is not None else "a peer whose uid could not be determined"
    response = JSONResponse(body(
        "forbidden",
        f"this server runs without API keys (--no-auth) and serves only connections from uid "
        f"{me} ({name}); this one came from {who}. Run the client as that user, or serve with "
        "API keys (drop --no-auth) and send 'Authorization: Bearer <key>'.", None),
        status_code=403)
    await response(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return ""
