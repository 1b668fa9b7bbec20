"""The API's one error handler, and the request size limit.

Every error body is ``{"code", "message", "field"}``. Onebox errors map by
class (``OneboxError.http_status`` / ``.code``); request validation errors name
the offending field; anything unexpected is a 500 whose body says only that,
with an id to find the traceback in the server log. Never a stack trace.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Sequence
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from onebox.errors import OneboxError, TooManyRequests

log = logging.getLogger(__name__)

HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
              405: "method_not_allowed", 406: "not_acceptable", 409: "conflict",
              413: "request_too_large", 415: "unsupported_media_type", 422: "invalid_input"}
# Bodies bounded by max_upload_bytes: multipart forms and raw file bytes (E2B's file-object
# upload); a JSON route never parses an octet-stream body (FastAPI answers 422).
# The routes that take files: the upload limit is theirs, whatever a request's content type
# says (a JSON route labelled multipart/form-data gets the JSON limit).
UPLOAD_ROUTES = re.compile(r"^(/v1/uploads|/v1/sessions/[^/]+/files|/v1/knowledge/upload"
                           r"|/e2b/sandbox/files)/?$")


def is_upload_route(scope: Scope) -> bool:
    return scope.get("method") == "POST" and bool(UPLOAD_ROUTES.match(scope.get("path", "")))


class Unauthorized(OneboxError):
    code = "unauthorized"
    http_status = 401


class RequestTooLarge(OneboxError):
    code = "request_too_large"
    http_status = 413


def body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "field": field}


def _field_of(loc: Sequence[Any]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "form")]
    return ".".join(parts) or None


async def onebox_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, OneboxError):
        if exc.http_status >= 500:
            log.error("%s %s: %s", request.method, request.url.path, exc.message)
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        if isinstance(exc, TooManyRequests):
            headers = {"Retry-After": str(exc.retry_after_s)}
        return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)
    if isinstance(exc, RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        field = _field_of(first.get("loc", ()))
        message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
        return JSONResponse(body("invalid_input", message, field), status_code=422)
    if isinstance(exc, StarletteHTTPException):
        code = HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return JSONResponse(body(code, str(exc.detail)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))
    if isinstance(exc, psycopg.errors.DataError):
        return JSONResponse(body("invalid_input", f"the database refused a value: "
                                 f"{exc.diag.message_primary or 'invalid value'}"), status_code=422)
    incident = secrets.token_hex(6)
    log.error("unhandled error %s on %s %s", incident, request.method, request.url.path,
              exc_info=exc)
    return JSONResponse(body("internal_error", f"internal error {incident}; the server log has "
                             "the details"), status_code=500)


def install_error_handlers(app: FastAPI) -> None:
    for kind in (OneboxError, RequestValidationError, StarletteHTTPException,
                 psycopg.errors.DataError, Exception):
        app.add_exception_handler(kind, onebox_error)


class BodyLimit:
    """Refuse request bodies above the limit (413), by Content-Length or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_upload_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        limit = self.max_upload_bytes if is_upload_route(scope) else self.max_bytes
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(send, limit)
            return
        seen = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    exceeded = True
                    raise RequestTooLarge(f"request body larger than {limit} bytes")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:  # whatever the app answers to a cut-off body, the answer is 413
                if not started:
                    started = True
                    await _too_large(send, limit)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except RequestTooLarge:
            if not started:
                await _too_large(send, limit)


async def _too_large(send: Send, limit: int) -> None:
    response = JSONResponse(body("request_too_large", f"request body larger than {limit} bytes; "
                                 "send less (the limit is ONEBOX_API__MAX_REQUEST_BYTES, or "
                                 "ONEBOX_API__MAX_UPLOAD_BYTES for uploads)"), status_code=413)
    await send({"type": "http.response.start", "status": 413,
                "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
     b"frame-ancestors 'none'"),
]


def with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """``send`` with ``headers`` added to the response's start."""
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)
    return sending


class SecurityHeaders:
    """Headers every response carries: the console loads nothing from elsewhere, is never framed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, with_headers(send, SECURITY_HEADERS))
