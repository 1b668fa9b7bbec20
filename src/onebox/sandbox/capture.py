"""Bounded output capture: keep the head and the tail, count what was dropped in between."""

from __future__ import annotations

import asyncio
import re
from collections import deque

CHUNK_BYTES = 65536
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


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

    def data(self) -> bytes:
        """The bytes kept, exactly; past the limit, head + a marker line + tail."""
        tail = b"".join(self.tail)
        if not self.truncated:
            return bytes(self.head) + tail
        return bytes(self.head) + self._marker().encode() + tail[-self.tail_cap :]

    def text(self) -> str:
        """The text view for people: see :func:`text_view` (head and tail decoded apart,
        so a character cut at the marker does not swallow it)."""
        tail = b"".join(self.tail)
        if not self.truncated:
            return text_view(bytes(self.head) + tail)
        return text_view(bytes(self.head)) + self._marker() + text_view(tail[-self.tail_cap :])

    def _marker(self) -> str:
        kept = len(self.head) + min(self.tail_len, self.tail_cap)
        return f"\n... [onebox: {self.total - kept} bytes truncated] ...\n"


def text_view(data: bytes) -> str:
    """Bytes as text a person and PostgreSQL can both take: invalid UTF-8 and NUL become
    U+FFFD. The bytes themselves are kept apart (``ExecResult.stdout_bytes``)."""
    return data.decode("utf-8", errors="replace").replace("\0", "\ufffd")


def safe_text(text: str) -> str:
    """A str PostgreSQL text and jsonb accept: NUL and lone surrogates become U+FFFD."""
    return text if text.isascii() and "\0" not in text else _UNSTORABLE.sub("\ufffd", text)


async def drain(reader: asyncio.StreamReader, capture: BoundedCapture) -> None:
    """Read a stream to EOF into the capture; memory stays bounded whatever is printed."""
    while True:
        chunk = await reader.read(CHUNK_BYTES)
        if not chunk:
            return
        capture.feed(chunk)
