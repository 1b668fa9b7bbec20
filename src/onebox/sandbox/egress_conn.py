"""One client connection of the egress proxy, and the bounds every connection lives under.

A sandbox must not be able to spend the supervisor's file descriptors or hold its
connections forever, so each connection is:

- admitted against a per-execution cap (``EgressLimits.max_connections``, answered
  ``429`` past it) and a gate shared by every execution of the process
  (``max_connections_total``, never more than a quarter of ``RLIMIT_NOFILE``;
  answered ``503``); each admitted connection holds at most two fds;
- read strictly (:mod:`onebox.sandbox.http_head`; ``400`` for an ambiguous head,
  ``411`` for any ``Transfer-Encoding``);
- cut when no byte moved in either direction for ``idle_timeout_s`` (``408`` while
  the head is still being read), and after ``total_timeout_s`` whatever happens.

Every refusal and every cut is recorded as a blocked attempt of the execution.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

from onebox.sandbox.http_head import MAX_HEAD_BYTES, MalformedHead, parse_head, target_of

if TYPE_CHECKING:
    from onebox.config import SandboxSettings

T = TypeVar("T")


class Gatekeeper(Protocol):
    """What a proxied connection asks of its execution's proxy (``egress.ExecutionEgress``):
    whether a destination is allowed (its address, or None), and to record a refusal."""

    limits: EgressLimits

    async def check(self, host: str, port: int) -> str | None: ...

    def refuse(self, host: str, port: int | None, reason: str) -> None: ...

CONNECT_TIMEOUT_S = 10.0
CHUNK_BYTES = 65536
TOO_MANY = "429 Too Many Requests"
BUSY = "503 Service Unavailable"
BAD = "400 Bad Request"


@dataclass(frozen=True)
class EgressLimits:
    max_connections: int = 64
    max_connections_total: int = 1024
    idle_timeout_s: float = 60.0
    total_timeout_s: float = 600.0

    @classmethod
    def from_settings(cls, cfg: SandboxSettings) -> EgressLimits:
        return cls(cfg.egress_max_connections, cfg.egress_max_connections_total,
                   cfg.egress_idle_timeout_s, cfg.egress_total_timeout_s)


def total_bound(configured: int) -> int:
    """The global cap actually used: at most a quarter of the process' fd limit, so the
    proxy (two fds per connection) can never take more than half of them."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft // 4))


class ConnectionGate:
    """Connections open across every execution of this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def enter(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        self.open -= 1


def response(status: str) -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()


async def answer(writer: asyncio.StreamWriter, status: str) -> None:
    """A body-less response; the caller closes the connection."""
    writer.write(response(status))
    with contextlib.suppress(OSError, TimeoutError):
        await asyncio.wait_for(writer.drain(), 1.0)


class Cut(Exception):
    """The connection exceeded a timeout; the message is the reason recorded."""


class Activity:
    """When a byte last moved on the connection (either direction), and its deadlines."""

    def __init__(self, limits: EgressLimits) -> None:
        self.limits = limits
        self.started = self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()

    def wait_s(self) -> float:
        """How long the next operation may block before a deadline is due."""
        now = time.monotonic()
        idle_left = self.limits.idle_timeout_s - (now - self.last)
        total_left = self.limits.total_timeout_s - (now - self.started)
        return max(0.0, min(idle_left, total_left))

    def overdue(self) -> str | None:
        now = time.monotonic()
        if now - self.started >= self.limits.total_timeout_s:
            return f"connection open longer than the total timeout of " \
                   f"{self.limits.total_timeout_s:g} s (sandbox.egress_total_timeout_s)"
        if now - self.last >= self.limits.idle_timeout_s:
            return f"connection idle for {self.limits.idle_timeout_s:g} s " \
                   "(sandbox.egress_idle_timeout_s)"
        return None

    async def bounded(self, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` until it finishes or a deadline passes (then raise Cut).

        Only for reads and drains, which may be cancelled and retried without loss.
        """
        while True:
            try:
                return await asyncio.wait_for(make(), self.wait_s())
            except TimeoutError:
                reason = self.overdue()
                if reason is not None:
                    raise Cut(reason) from None


class ProxyConnection:
    """Serves one client of an execution's listener: one request, or one CONNECT tunnel."""

    def __init__(self, egress: Gatekeeper, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.egress = egress
        self.reader = reader
        self.writer = writer
        self.activity = Activity(egress.limits)
        self.host: str = "-"
        self.port: int | None = None

    async def serve(self) -> None:
        try:
            await self._serve()
        except Cut as cut:
            self.egress.refuse(self.host, self.port, str(cut))
            if self.host == "-":  # still reading the head: tell the client why
                await answer(self.writer, "408 Request Timeout")
        except MalformedHead as exc:
            self.egress.refuse(self.host, self.port, f"malformed request: {exc}")
            await answer(self.writer, BAD)

    async def _serve(self) -> None:
        head = parse_head(await self._read_head())
        method, host, port, upstream_head = target_of(head)
        if method != "CONNECT" and head.has_transfer_encoding:
            self.egress.refuse(host, port, "Transfer-Encoding on a proxied request (send a "
                               "Content-Length body)")
            await answer(self.writer, "411 Length Required")
            return
        ip = await self.egress.check(host, port)
        if ip is None:
            await answer(self.writer, "403 Forbidden")
            return
        self.host, self.port = host, port
        up_reader, up_writer = await asyncio.wait_for(
            asyncio.open_connection(ip, port), CONNECT_TIMEOUT_S)
        try:
            await self._relay(method, head.content_length, upstream_head, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _read_head(self) -> bytes:
        try:
            return await self.activity.bounded(partial(self.reader.readuntil, b"\r\n\r\n"))
        except asyncio.LimitOverrunError:
            raise MalformedHead(f"request head over {MAX_HEAD_BYTES} bytes") from None

    async def _relay(self, method: str, length: int, upstream_head: bytes,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> None:
        if method == "CONNECT":
            self.writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            pipes = [asyncio.ensure_future(self._pipe(self.reader, up_writer)),
                     asyncio.ensure_future(self._pipe(up_reader, self.writer))]
            try:
                await asyncio.gather(*pipes)
            finally:
                for pipe in pipes:
                    pipe.cancel()
            return
        up_writer.write(upstream_head)
        await self._copy_body(length, up_writer)
        await self._pipe(up_reader, self.writer)

    async def _copy_body(self, length: int, up_writer: asyncio.StreamWriter) -> None:
        """Exactly ``length`` body bytes from the client, streamed (never held whole)."""
        while length > 0:
            data = await self.activity.bounded(partial(self.reader.read, min(length, CHUNK_BYTES)))
            if not data:
                raise asyncio.IncompleteReadError(b"", length)
            length -= len(data)
            await self._send(up_writer, data)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await self.activity.bounded(partial(reader.read, CHUNK_BYTES)):
                await self._send(writer, data)
        except OSError:  # swallow-ok: a reset by either peer is how a tunnel ends
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.write_eof()

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        self.activity.touch()
        writer.write(data)
        await self.activity.bounded(writer.drain)
