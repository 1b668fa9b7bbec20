"""Who is at the other end of a loopback connection: only the operator's own uid may
reach a server that runs without API keys (``--no-auth``).

Loopback keeps other machines out, not other users of this one (nor a session uid that
escaped its sandbox). :class:`OperatorPeerOnly` serves a connection only when the socket at
its other end belongs to the server's own effective uid: the kernel's table of TCP sockets
(``/proc/net/tcp``, ``/proc/net/tcp6``) names the owner (``uid`` column) of the socket whose
local address is the client's and whose remote address is the server's. Any other uid, or a
peer the table does not show (another network namespace), is answered 403. The API
(``api/app.py``) and ``onebox mcp --http`` (``mcp/transports.py``) both use it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import pwd
import sys

from starlette.types import ASGIApp, Receive, Scope, Send

from onebox.config import Settings

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
    message = (f"this server runs without API keys (--no-auth) and serves only connections "
               f"from uid {me} ({name}); this one came from {who}. Run the client as that "
               "user, or serve with API keys (drop --no-auth) and send 'Authorization: "
               "Bearer <key>'.")
    data = json.dumps({"code": "forbidden", "message": message, "field": None}).encode()
    await send({"type": "http.response.start", "status": 403, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
