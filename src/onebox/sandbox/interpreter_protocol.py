"""Frames between the host and the interpreter server inside the sandbox (interp_server.py).

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. Everything that
comes from inside is hostile: a frame over :data:`MAX_FRAME_BYTES`, bytes that are not
JSON, JSON of the wrong shape, or more than :data:`MAX_CELL_FRAME_BYTES` of frames in one
call raise :class:`ProtocolViolation`, and the host kills that interpreter (never itself).
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass
from typing import Any

from onebox.sandbox.base import CellError, CellOutput

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 32 * 1024 * 1024
MAX_CELL_FRAME_BYTES = 64 * 1024 * 1024
MAX_CELL_FRAMES = 10_000
MAX_MIME_TYPES = 32
MAX_MIME_NAME = 128
MAX_ERROR_FIELD = 1024 * 1024


class ProtocolViolation(Exception):
    """What the interpreter sent is not a frame of the protocol; the text says why."""


@dataclass(frozen=True)
class Ready:
    pid: int


@dataclass(frozen=True)
class Done:
    count: int


Frame = Ready | Done | CellOutput | CellError


def encode(message: dict[str, Any]) -> bytes:
    payload = json.dumps(message).encode()
    return HEADER.pack(len(payload)) + payload


class FrameReader:
    """Reads frames from the interpreter's socket within a per-call budget."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.budget_bytes = MAX_CELL_FRAME_BYTES
        self.budget_frames = MAX_CELL_FRAMES

    def new_call(self) -> None:
        self.budget_bytes, self.budget_frames = MAX_CELL_FRAME_BYTES, MAX_CELL_FRAMES

    async def read(self) -> Frame:
        """The next frame; EOFError when the interpreter is gone."""
        try:
            (size,) = HEADER.unpack(await self.reader.readexactly(HEADER.size))
            if size > MAX_FRAME_BYTES:
                raise ProtocolViolation(
                    f"it sent a frame of {size} bytes, over the {MAX_FRAME_BYTES} byte bound")
            self._spend(size)
            payload = await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise EOFError("the interpreter closed its channel") from exc
        return parse(payload)

    def _spend(self, size: int) -> None:
        self.budget_bytes -= size
        self.budget_frames -= 1
        if self.budget_bytes < 0 or self.budget_frames < 0:
            raise ProtocolViolation(
                f"it sent more than {MAX_CELL_FRAMES} frames or {MAX_CELL_FRAME_BYTES} bytes "
                "of results in one call")


def parse(payload: bytes) -> Frame:
    """One frame's JSON, validated into a typed value."""
    try:
        message = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolViolation("it sent a frame that is not JSON") from exc
    if not isinstance(message, dict):
        raise ProtocolViolation("it sent a frame that is not a JSON object")
    kind = message.get("type")
    if kind == "result":
        return CellOutput(_mime_data(message.get("data")), message.get("main") is True)
    if kind == "error":
        return CellError(*(_text(message.get(k), k) for k in ("name", "value", "traceback")))
    if kind in ("done", "ready"):
        number = message.get("count" if kind == "done" else "pid")
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ProtocolViolation(f"it sent a {kind!r} frame without a valid number")
        return Done(number) if kind == "done" else Ready(number)
    raise ProtocolViolation(f"it sent a frame of unknown type {str(kind)[:40]!r}")


def _mime_data(data: object) -> dict[str, str]:
    if not isinstance(data, dict) or not data or len(data) > MAX_MIME_TYPES:
        raise ProtocolViolation("it sent a result without a valid data mapping")
    for mime, value in data.items():
        if not isinstance(mime, str) or not 0 < len(mime) <= MAX_MIME_NAME or "/" not in mime:
            raise ProtocolViolation("it sent a result with an invalid MIME type")
        if not isinstance(value, str):
            raise ProtocolViolation(f"it sent a non-text value for {mime[:40]!r}")
    return dict(data)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise ProtocolViolation(f"it sent an error frame whose {name!r} is not text")
    return value[:MAX_ERROR_FIELD]
