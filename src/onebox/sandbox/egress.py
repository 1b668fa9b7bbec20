"""The egress proxy: HTTP and HTTPS CONNECT to allow-listed domains, nothing else.

One listener per execution that was granted domains, on a unix socket in the
execution's run directory (seen inside as ``/run/onebox/proxy.sock``, relayed
from ``127.0.0.1:3128`` by ``forwarder.py``). The proxy resolves names itself
and connects to the address it checked, so DNS tricks cannot redirect it. It
refuses private, loopback, link-local (cloud metadata) and reserved addresses
unless ``sandbox.egress_allow_private`` lists them, and records every refusal.
Heads are parsed strictly (``http_head.py``); connection caps and timeouts are
``egress_conn.py``'s, so one sandbox cannot spend the supervisor's descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from onebox.domains import DomainRule, allowed
from onebox.errors import PolicyViolation
from onebox.sandbox.base import BlockedAttempt, ExecRequest
from onebox.sandbox.egress_conn import (
    BUSY,
    TOO_MANY,
    ConnectionGate,
    EgressLimits,
    ProxyConnection,
    response,
    total_bound,
)
from onebox.sandbox.http_head import MAX_HEAD_BYTES, parse_target, target_of

logger = logging.getLogger(__name__)
__all__ = ["DomainRule", "EgressLimits", "EgressProxy", "ExecutionEgress", "address_refusal",
           "allowed", "parse_target", "target_of"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
ACCEPT_BACKLOG = 16  # also the most connections one accept pass takes before refusing them
MAX_RECORDED = 1000  # refusals kept per execution; more are only counted


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


class ExecutionEgress:
    """The proxy listener of one execution; collects its refused attempts.

    Each client connection is admitted against the execution's cap and the proxy's
    global gate, then served under an idle and a total timeout.
    """

    def __init__(
        self, socket_path: Path, rules: Sequence[DomainRule], session_id: str,
        allow_private: Sequence[IPNetwork], limits: EgressLimits | None = None,
        gate: ConnectionGate | None = None,
    ) -> None:  # fmt: skip
        self.socket_path = socket_path
        self.rules = tuple(rules)
        self.session_id = session_id
        self.allow_private = tuple(allow_private)
        self.limits = limits or EgressLimits()
        self.gate = gate or ConnectionGate(self.limits.max_connections_total)
        self.unrecorded = 0  # refusals past MAX_RECORDED, counted only
        self._blocked: list[BlockedAttempt] = []
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._open = 0

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(
            self._on_client, path=str(self.socket_path), limit=MAX_HEAD_BYTES,
            backlog=ACCEPT_BACKLOG)
        os.chmod(self.socket_path, 0o666)

    def attempts(self) -> tuple[BlockedAttempt, ...]:
        return tuple(self._blocked)

    def refuse(self, host: str, port: int | None, reason: str) -> None:
        if len(self._blocked) >= MAX_RECORDED:
            self.unrecorded += 1
            return
        at = datetime.now(UTC).isoformat()
        self._blocked.append(BlockedAttempt(host, port, reason, at, self.session_id))
        logger.info("egress blocked session=%s %s:%s: %s", self.session_id, host, port, reason)

    def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Admit or refuse at once, in the accept callback: a refused connection's fd is
        closed before the next batch is accepted, so a flood cannot pile them up."""
        refusal = self._admit()
        if refusal is not None:
            self.refuse("-", None, refusal[1])
            writer.write(response(refusal[0]))
            writer.close()
            return
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await ProxyConnection(self, reader, writer).serve()
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            logger.debug("egress: a sandbox's connection ended with an error", exc_info=True)
        finally:
            writer.close()
            self._open -= 1
            self.gate.leave()

    def _admit(self) -> tuple[str, str] | None:
        """None when the connection may proceed (counted), else (status, reason)."""
        if self._open >= self.limits.max_connections:
            return TOO_MANY, (f"over {self.limits.max_connections} concurrent connections "
                              "for this session (sandbox.egress_max_connections)")
        if not self.gate.enter():
            return BUSY, (f"over {self.gate.limit} concurrent connections for all sessions "
                          "(sandbox.egress_max_connections_total)")
        self._open += 1
        return None

    async def check(self, host: str, port: int) -> str | None:
        """The address to connect to, or None after recording why not."""
        if not allowed(self.rules, host, port):
            self.refuse(host, port, "not in the step's allowed domains")
            return None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            self.refuse(host, port, f"DNS lookup failed: {exc}")
            return None
        addresses = [str(info[4][0]) for info in infos]
        reason: str | None = "no address"
        for ip in addresses:
            reason = address_refusal(ip, self.allow_private)
            if reason is None:
                return ip
        self.refuse(host, port, f"resolves only to refused addresses: {reason}")
        return None

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()


class EgressProxy:
    """Opens an :class:`ExecutionEgress` for each execution granted domains."""

    def __init__(self, allow_private: Sequence[str], limits: EgressLimits | None = None) -> None:
        try:
            self.allow_private = [ipaddress.ip_network(n, strict=False) for n in allow_private]
        except ValueError as exc:
            raise PolicyViolation(
                f"sandbox.egress_allow_private: {exc}", field="sandbox.egress_allow_private"
            ) from exc
        self.limits = limits or EgressLimits()
        self.gate = ConnectionGate(total_bound(self.limits.max_connections_total))
        self._open: set[ExecutionEgress] = set()

    async def open(self, run_dir: Path, request: ExecRequest) -> ExecutionEgress | None:
        if not request.network.enabled:
            return None
        rules = [DomainRule.parse(d) for d in request.network.allow_domains]
        egress = ExecutionEgress(run_dir / "proxy.sock", rules, request.session_id,
                                 self.allow_private, self.limits, self.gate)  # fmt: skip
        await egress.start()
        self._open.add(egress)
        return egress

    def forget(self, egress: ExecutionEgress) -> None:
        self._open.discard(egress)

    async def close(self) -> None:
        for egress in list(self._open):
            await egress.close()
        self._open.clear()
