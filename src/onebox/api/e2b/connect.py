"""The Connect protocol (connectrpc.com/docs/protocol) as E2B's envd speaks it: JSON codec,
no compression. Unary calls are a plain JSON POST answered with JSON (an error is an HTTP
status and ``{"code", "message"}``); a server stream takes one enveloped request message and
answers 200 with enveloped messages (``flags:u8 length:u32be json``) ending with an
end-of-stream envelope (flag 2) that carries the error, if any."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from onebox.errors import Conflict, NotFound, OneboxError, PolicyViolation, ValidationError

log = logging.getLogger(__name__)

STREAM_TYPE = "application/connect+json"
END_STREAM = 0x02
MAX_MESSAGE_BYTES = 1 << 20
HTTP_OF = {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403,
           "not_found": 404, "already_exists": 409, "resource_exhausted": 429,
           "unimplemented": 501, "internal": 500, "unavailable": 503,
           "deadline_exceeded": 504, "canceled": 499, "failed_precondition": 400}


class RpcError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


M = TypeVar("M")  # one message of a stream

def rpc_error(exc: Exception) -> RpcError:
    """A onebox error as the Connect code the E2B SDK maps to its own exceptions."""
    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, NotFound):
        return RpcError("not_found", exc.message)
    if isinstance(exc, Conflict):
        return RpcError("already_exists", exc.message)
    if isinstance(exc, ValidationError):
        return RpcError("invalid_argument", exc.message)
    if isinstance(exc, PolicyViolation):
        return RpcError("permission_denied", exc.message)
    if isinstance(exc, OneboxError):
        code = "unauthenticated" if exc.http_status == 401 else "internal"
        return RpcError(code, exc.message)
    raise exc


def unary_error(exc: Exception) -> JSONResponse:
    err = rpc_error(exc)
    return JSONResponse(err.to_dict(), status_code=HTTP_OF.get(err.code, 500))


async def unary_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_MESSAGE_BYTES:
        raise RpcError("resource_exhausted", f"request message over {MAX_MESSAGE_BYTES} bytes")
    return _decode(raw or b"{}")


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except ValueError:
        raise RpcError("invalid_argument", "the request message is not JSON (onebox speaks "
                       "Connect with the JSON codec, as the E2B SDK does)") from None
    if not isinstance(message, dict):
        raise RpcError("invalid_argument", "the request message must be a JSON object")
    return message


async def stream_body(request: Request) -> dict[str, Any]:
    """The one enveloped message of a server-streaming call."""
    raw = await request.body()
    if len(raw) < 5:
        raise RpcError("invalid_argument", "a streaming call needs one enveloped message")
    flags, length = struct.unpack(">BI", raw[:5])
    if flags & 0x01:
        raise RpcError("unimplemented", "compressed messages are not supported")
    if length > MAX_MESSAGE_BYTES or len(raw) < 5 + length:
        raise RpcError("invalid_argument", "the request envelope is truncated or too large")
    return _decode(raw[5:5 + length])


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


def stream_response(messages: AsyncIterator[dict[str, Any]],
                    still_allowed: Callable[[], Awaitable[bool]] | None = None,
                    every_s: float = 10.0) -> StreamingResponse:
    """A server stream of ``messages``; with ``still_allowed``, asked at least every
    ``every_s`` seconds (also while no message comes), the stream ends with an
    ``unauthenticated`` error the first time it says no (a revoked key, a removed tenant,
    a deleted sandbox), and no message after that is sent."""
    if still_allowed is not None:
        messages = while_allowed(messages, still_allowed, every_s)
    return StreamingResponse(_framed(messages), media_type=STREAM_TYPE)


async def while_allowed(messages: AsyncIterator[M],
                        still_allowed: Callable[[], Awaitable[bool]],
                        every_s: float) -> AsyncIterator[M]:
    """``messages`` while ``still_allowed`` says yes, asked at least every ``every_s``
    (also while no message comes); RpcError ``unauthenticated`` the first time it says no."""
    source = aiter(messages)
    pending: asyncio.Task[M] | None = None
    due = time.monotonic() + every_s
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({pending}, timeout=max(due - time.monotonic(), 0))
            if time.monotonic() >= due:
                due = time.monotonic() + every_s
                if not await still_allowed():
                    raise RpcError("unauthenticated", "access to this sandbox ended (the key "
                                   "was revoked, the tenant removed, or the sandbox is gone)")
            if done:
                try:
                    message = pending.result()
                except StopAsyncIteration:
                    return
                pending = None
                yield message
    finally:
        if pending is not None:  # let the cancelled read end before the source is closed
            pending.cancel()
            await asyncio.wait({pending})
        if isinstance(source, AsyncGenerator):
            await source.aclose()


async def _framed(messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for message in messages:
            yield envelope(message)
    except Exception as exc:  # noqa: BLE001 # swallow-ok: ends the stream as a Connect error; unknown ones logged
        yield envelope({"error": _stream_error(exc).to_dict()}, END_STREAM)
        return
    yield envelope({}, END_STREAM)


def _stream_error(exc: Exception) -> RpcError:
    try:
        return rpc_error(exc)
    except Exception:  # noqa: BLE001 - unexpected: the client gets no traceback, the log does
        log.exception("E2B call failed")
        return RpcError("internal", f"the call failed ({type(exc).__name__})")


def error_stream(exc: Exception) -> StreamingResponse:
    """A streaming call refused before it started: still HTTP 200, the error at the end."""
    frame = envelope({"error": _stream_error(exc).to_dict()}, END_STREAM)

    async def one() -> AsyncIterator[bytes]:
        yield frame

    return StreamingResponse(one(), media_type=STREAM_TYPE)


def timeout_s(request: Request) -> float | None:
    """The caller's deadline (``Connect-Timeout-Ms``), in seconds; None when unset."""
    raw = request.headers.get("connect-timeout-ms", "")
    return int(raw) / 1000 if raw.isdigit() and int(raw) > 0 else None
