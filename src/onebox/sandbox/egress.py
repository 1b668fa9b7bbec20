"""The egress proxy: HTTP and HTTPS CONNECT to allow-listed domains, nothing else.

One listener per execution that was granted domains, on a unix socket in the
execution's run directory (seen inside as ``/run/onebox/proxy.sock``, relayed
from ``127.0.0.1:3128`` by ``forwarder.py``). The proxy resolves names itself
and connects to the address it checked, so DNS tricks cannot redirect it. It
refuses private, loopback, link-local (cloud metadata) and reserved addresses
unless ``sandbox.egress_allow_private`` lists them, and records every refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from onebox.errors import PolicyViolation
from onebox.sandbox.base import BlockedAttempt, ExecRequest

logger = logging.getLogger(__name__)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_PORTS = (80, 443)
HEAD_LIMIT = 64 * 1024
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class DomainRule:
    """``api.example.com``, ``*.example.org`` (subdomains only), optionally ``:port``."""

    pattern: str
    port: int | None

    @classmethod
    def parse(cls, text: str) -> DomainRule:
        raw = text.strip().lower().rstrip(".")
        host, _, port = raw.rpartition(":") if raw.count(":") == 1 else (raw, "", "")
        if not host or " " in host or "/" in host:
            raise PolicyViolation(f"invalid allowed domain {text!r}", field="network.allow_domains")
        if port and not port.isdigit():
            raise PolicyViolation(f"invalid port in {text!r}", field="network.allow_domains")
        return cls(host, int(port) if port else None)

    def matches(self, host: str, port: int) -> bool:
        if self.port is None and port not in DEFAULT_PORTS:
            return False
        if self.port is not None and port != self.port:
            return False
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:]) and host != self.pattern[2:]
        return host == self.pattern


def allowed(rules: Sequence[DomainRule], host: str, port: int) -> bool:
    host = host.lower().rstrip(".")
    return any(rule.matches(host, port) for rule in rules)


def address_refusal(ip: str, allow_private: Sequence[IPNetwork]) -> str | None:
    """Why the proxy refuses to connect to ``ip``, or None when it may."""
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if any(addr in net for net in allow_private):
        return None
    for label, flag in (
        ("loopback", addr.is_loopback), ("link-local/metadata", addr.is_link_local),
        ("unspecified", addr.is_unspecified), ("multicast", addr.is_multicast),
        ("private", addr.is_private), ("reserved", addr.is_reserved),
    ):  # fmt: skip
        if flag:
            return f"{ip} is a {label} address"
    return None


def parse_target(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, request head to send upstream) from a proxy request head."""
    line, _, rest = head.partition(b"\r\n")
    method, target, version = line.decode("latin-1").split(" ", 2)
    if method.upper() == "CONNECT":
        host, port = _split_hostport(target, 443)
        return "CONNECT", host, port, b""
    if not target.lower().startswith("http://"):
        raise ValueError("only absolute http:// URLs and CONNECT are proxied")
    authority, _, path = target[7:].partition("/")
    host, port = _split_hostport(authority, 80)
    origin = f"{method} /{path} {version}\r\n".encode("latin-1")
    return method, host, port, origin + _upstream_headers(rest, authority)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            value = int(line.split(b":", 1)[1].strip())
            if value < 0:
                raise ValueError("negative Content-Length")
            return value
    return 0


HOP_HEADERS = (b"host:", b"connection:", b"proxy-connection:", b"proxy-authorization:",
               b"keep-alive:")  # fmt: skip


def _upstream_headers(rest: bytes, authority: str) -> bytes:
    """The client's headers with Host forced to the checked authority and one request only.

    A different Host header (or a second request on a kept-alive connection) could
    otherwise reach another virtual host on the same allowed address.
    """
    lines = [ln for ln in rest.split(b"\r\n") if ln and not ln.lower().startswith(HOP_HEADERS)]
    lines += [b"Host: " + authority.encode("latin-1"), b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _split_hostport(text: str, default: int) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default
    host, sep, port = text.rpartition(":")
    return (host, int(port)) if sep and port.isdigit() else (text, default)


class ExecutionEgress:
    """The proxy listener of one execution; collects its refused attempts."""

    def __init__(
        self, socket_path: Path, rules: Sequence[DomainRule], session_id: str,
        allow_private: Sequence[IPNetwork],
    ) -> None:  # fmt: skip
        self.socket_path = socket_path
        self.rules = tuple(rules)
        self.session_id = session_id
        self.allow_private = tuple(allow_private)
        self._blocked: list[BlockedAttempt] = []
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._on_client, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o666)

    def attempts(self) -> tuple[BlockedAttempt, ...]:
        return tuple(self._blocked)

    def _refuse(self, host: str, port: int | None, reason: str) -> None:
        at = datetime.now(UTC).isoformat()
        self._blocked.append(BlockedAttempt(host, port, reason, at, self.session_id))
        logger.info("egress blocked session=%s %s:%s: %s", self.session_id, host, port, reason)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > HEAD_LIMIT:
            raise ValueError("request head too large")
        method, host, port, upstream_head = parse_target(head)
        if method != "CONNECT" and b"transfer-encoding:" in head.lower():
            writer.write(b"HTTP/1.1 411 Length Required\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        ip = await self._check(host, port)
        if ip is None:
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.wait_for(
            asyncio.open_connection(ip, port), CONNECT_TIMEOUT_S
        )
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            return
        up_writer.write(upstream_head)
        length = _content_length(head)
        if length:
            up_writer.write(await reader.readexactly(length))
        await _pipe(up_reader, writer)
        up_writer.close()

    async def _check(self, host: str, port: int) -> str | None:
        """The address to connect to, or None after recording why not."""
        if not allowed(self.rules, host, port):
            self._refuse(host, port, "not in the step's allowed domains")
            return None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            self._refuse(host, port, f"DNS lookup failed: {exc}")
            return None
        addresses = [str(info[4][0]) for info in infos]
        reason: str | None = "no address"
        for ip in addresses:
            reason = address_refusal(ip, self.allow_private)
            if reason is None:
                return ip
        self._refuse(host, port, f"resolves only to refused addresses: {reason}")
        return None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.write_eof()


class EgressProxy:
    """Opens an :class:`ExecutionEgress` for each execution granted domains."""

    def __init__(self, allow_private: Sequence[str]) -> None:
        try:
            self.allow_private = [ipaddress.ip_network(n, strict=False) for n in allow_private]
        except ValueError as exc:
            raise PolicyViolation(
                f"sandbox.egress_allow_private: {exc}", field="sandbox.egress_allow_private"
            ) from exc
        self._open: set[ExecutionEgress] = set()

    async def open(self, run_dir: Path, request: ExecRequest) -> ExecutionEgress | None:
        if not request.network.enabled:
            return None
        rules = [DomainRule.parse(d) for d in request.network.allow_domains]
        egress = ExecutionEgress(run_dir / "proxy.sock", rules, request.session_id,
                                 self.allow_private)  # fmt: skip
        await egress.start()
        self._open.add(egress)
        return egress

    def forget(self, egress: ExecutionEgress) -> None:
        self._open.discard(egress)

    async def close(self) -> None:
        for egress in list(self._open):
            await egress.close()
        self._open.clear()
