"""Bounded output capture: keep the head and the tail, count what was dropped in between."""

from __future__ import annotations

import asyncio
from collections import deque

CHUNK_BYTES = 65536


class BoundedCapture:
    """Holds at most ``limit`` bytes: the first half as they came, the last half as a ring."""

    def __init__(self, limit: int) -> None:
        self.limit = max(2, limit)
        self.head_cap = self.limit // 2
        self.tail_cap = self.limit - self.head_cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self.tail_cap:
            self.tail.clear()
            data = data[-self.tail_cap :]
            self.tail_len = 0
        self.tail.append(data)
        self.tail_len += len(data)
        while self.tail_len - len(self.tail[0]) >= self.tail_cap:
            self.tail_len -= len(self.tail.popleft())

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        tail = b"".join(self.tail)
        if not self.truncated:
            return (bytes(self.head) + tail).decode("utf-8", errors="replace")
        tail = tail[-self.tail_cap :]
        dropped = self.total - len(self.head) - len(tail)
        marker = f"\n... [onebox: {dropped} bytes truncated] ...\n"
        head = bytes(self.head).decode("utf-8", errors="replace")
        return head + marker + tail.decode("utf-8", errors="replace")


async def drain(reader: asyncio.StreamReader, capture: BoundedCapture) -> None:
    """Read a stream to EOF into the capture; memory stays bounded whatever is printed."""
    while True:
        chunk = await reader.read(CHUNK_BYTES)
        if not chunk:
            return
        capture.feed(chunk)
