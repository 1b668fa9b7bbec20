"""The listening socket of `onebox serve`/`up`/`mcp --http`, and the address record.

The socket is bound (and listening) before anything is announced or started: a second
server on a busy port stops with a clear error, having printed no banner, created no key
and touched no record. ``$ONEBOX_HOME/server-address`` is written by the server that holds
the port, and removed on exit only while it is still the file that server wrote.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from onebox.client.spec import ADDRESS_FILE, recorded_url
from onebox.errors import ConfigError
from onebox.sandbox.hostfs import file_identity as _identity

BACKLOG = 2048  # uvicorn's default


def listen(host: str, port: int, home: Path) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: a free one, read it from the socket)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio: TCP_NODELAY
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)  # SO_REUSEADDR lets two sockets bind until one listens
    except OSError as exc:
        sock.close()
        raise ConfigError(_refusal(host, port, exc, home), field="port") from exc
    return sock


def _refusal(host: str, port: int, exc: OSError, home: Path) -> str:
    if exc.errno != errno.EADDRINUSE:
        return (f"cannot listen on {host} port {port}: {exc.strerror or exc}; pick another "
                "address with --host or another port with --port")
    recorded = recorded_url(home)
    if recorded is not None and _port_of(recorded) == port:
        return (f"port {port} is in use: onebox is already running at {recorded} (recorded "
                f"in {home / ADDRESS_FILE}); use that one, or stop it, or start this one on "
                "a free port with --port")
    return (f"port {port} on {host} is already in use by another program; stop it, or pick "
            "a free port with --port")


def _port_of(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


@contextlib.contextmanager
def recorded_address(home: Path, url: str) -> Iterator[None]:
    """``home/server-address`` names ``url`` while this server runs: `onebox exec` and the
    SDK find a local server there. Written whole (a new file renamed into place), and
    removed on exit only if it is still that file with that address: a record another
    server wrote since is left alone."""
    path = home / ADDRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{ADDRESS_FILE}.{os.getpid()}")
    tmp.write_text(url + "\n")
    os.replace(tmp, path)
    mine = _identity(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if _identity(path) == mine and path.read_text().strip() == url:
                path.unlink()



