"""`onebox mcp` transports: stdio (one client, tenant ``default``) and streamable HTTP.

Over HTTP with API keys (``api.auth``, the default) every request needs
``Authorization: Bearer <key>`` and each tool call acts as that key's tenant; without
keys (``--no-auth``) the server listens on loopback only, serves connections from its own uid
only, and acts as ``default``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from onebox.config import Settings
from onebox.errors import ConfigError
from onebox.mcp.server import build_server
from onebox.mcp.state import McpState, Unauthorized, open_state
from onebox.peers import OperatorPeerOnly

HTTP_PATH = "/mcp"


async def serve_stdio(settings: Settings, *, worker: bool) -> None:
    state = await open_state(settings, worker=worker, auth=False)
    try:
        await build_server(state).run_stdio_async()
    finally:
        await state.close()


class BearerKeyRequired:
    """401 before the MCP app for a request without a valid API key; a stream it answers
    (``text/event-stream``) ends once the key is revoked (see :func:`serve_while_allowed`)."""

    def __init__(self, app: ASGIApp, state: McpState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        try:
            await self.state.tenant(headers)
        except Unauthorized as exc:
            await _refuse(send, exc)
            return

        async def allowed() -> bool:
            try:
                await self.state.tenant(headers)
            except Unauthorized:
                return False
            return True

        await serve_while_allowed(self.app, scope, receive, send, allowed,
                                  self.state.settings.api.key_recheck_s)


class _Revoked(Exception):
    """The key of a stream being answered was revoked."""


async def serve_while_allowed(app: ASGIApp, scope: Scope, receive: Receive, send: Send,
                              allowed: Callable[[], Awaitable[bool]], every_s: float) -> None:
    """Run ``app``; once its response is an event stream, ask ``allowed`` every ``every_s``
    and before each chunk is sent (so nothing produced after a revocation is), and end the
    stream at the first no."""
    status = {"stream": False, "ended": False}

    async def guarded(message: Message) -> None:
        if message["type"] == "http.response.start":
            status["stream"] = _is_event_stream(message)
        elif status["stream"] and message.get("body") and not await allowed():
            raise _Revoked
        status["ended"] = message["type"] == "http.response.body" \
            and not message.get("more_body", False)
        await send(message)

    task = asyncio.ensure_future(app(scope, receive, guarded))
    revoked = False
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=every_s)
            if not task.done() and status["stream"] and not await allowed():
                revoked = True
                task.cancel()
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, _Revoked):
            await asyncio.wait({task})
    if not revoked:
        try:
            task.result()
        except _Revoked:
            revoked = True
    if revoked and status["stream"] and not status["ended"]:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _is_event_stream(message: Message) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
               for k, v in message.get("headers", []))


async def _refuse(send: Send, exc: Unauthorized) -> None:
    body = json.dumps({"error": exc.to_dict()}).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": body})


def check_exposure(settings: Settings, host: str, loopback: bool) -> None:
    if not settings.api.auth and not loopback:
        raise ConfigError(
            f"refusing to serve MCP on {host} without API keys: anyone who can reach it could "
            "run code. Listen on 127.0.0.1, or keep auth on (drop --no-auth) and create keys "
            "with `onebox keys create`.", field="host")


def http_app(state: McpState, host: str) -> ASGIApp:
    """The streamable HTTP app: with keys each request needs one; without, only the
    operator's own uid may connect (onebox.peers)."""
    app = build_server(state).streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    if state.auth:
        return BearerKeyRequired(app, state)
    return OperatorPeerOnly(app, state.settings)


async def serve_http(settings: Settings, sock: socket.socket, *, host: str,
                     worker: bool) -> None:
    """Serve on ``sock``, already listening (bound before anything was announced)."""
    import uvicorn

    state = await open_state(settings, worker=worker, auth=settings.api.auth)
    try:
        config = uvicorn.Config(http_app(state, host), host=host, port=sock.getsockname()[1],
                                log_level=settings.log_level.lower(), access_log=False)
        server = uvicorn.Server(config)
        # SIGTERM/SIGINT stop the server and then drain the worker (below), as `onebox
        # serve` does; uvicorn's own handling re-raises the signal before that could run.
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, _stopper(server))
        await server.serve(sockets=[sock])
    finally:
        await state.close()


def _stopper(server: Any) -> Callable[[], None]:
    def stop() -> None:
        server.force_exit = server.should_exit  # a second signal: leave now
        server.should_exit = True
    return stop
