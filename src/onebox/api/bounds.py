"""The JSON depth bound on request bodies, checked on the raw bytes before anything parses them.

A body nested 500 deep parses, then breaks recursive code further on (a 500); one
nested 5,000 deep breaks the parser itself (a vague 400). Both are refused here with
a 422 that names the bound. Runs inside the size limit (``BodyLimit``), so the body
it buffers is at most ``ONEBOX_API__MAX_REQUEST_BYTES``.
"""

from __future__ import annotations

import asyncio
import json

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from onebox.api.errors import body
from onebox.bounds import MAX_JSON_DEPTH, raw_json_too_deep

#: bodies larger than this are measured off the event loop
INLINE_CHECK_BYTES = 64 << 10


class JsonDepthLimit:
    """Refuse JSON request bodies nested deeper than ``max_depth`` (422, code invalid_input)."""

    def __init__(self, app: ASGIApp, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        messages, raw = await _read_body(receive)
        if await self._too_deep(raw):
            await _refuse(send, f"request body is nested deeper than {self.max_depth} levels; "
                          "flatten the JSON (nested lists and objects)")
            return
        if lone_surrogate(raw):
            await _refuse(send, "request body holds a lone UTF-16 surrogate (a \\ud800-"
                          "\\udfff escape without its pair) in a string; send valid Unicode")
            return
        await self.app(scope, _replay(messages, receive), send)

    async def _too_deep(self, raw: bytes) -> bool:
        if len(raw) <= INLINE_CHECK_BYTES:
            return raw_json_too_deep(raw, self.max_depth)
        return await asyncio.to_thread(raw_json_too_deep, raw, self.max_depth)


def _is_json(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    return content_type == b"application/json" or content_type.endswith(b"+json")


async def _read_body(receive: Receive) -> tuple[list[Message], bytes]:
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return messages, b"".join(chunks)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


def lone_surrogate(raw: bytes) -> bool:
    """Whether a JSON body has a string with an unpaired surrogate: Python parses one, but
    nothing can encode it (PostgreSQL, UTF-8 logs), so it would fail far from the request.
    Only bodies with a surrogate escape at all are parsed here (depth already checked)."""
    if b"\\ud" not in raw.lower():
        return False
    try:
        data = json.loads(raw)
    except ValueError:
        return False  # the request's own parser answers this one
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _unencodable(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


async def _refuse(send: Send, message: str) -> None:
    response = JSONResponse(body("invalid_input", message, "body"), status_code=422)
    await send({"type": "http.response.start", "status": 422, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})
