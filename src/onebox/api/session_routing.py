"""Every API server of one database serves every session: requests go to the session's holder.

A request naming a session (``/v1/sessions/{id}...``, E2B's ``/e2b/sandboxes/{id}...``, or
the ``E2b-Sandbox-Id`` header of ``/e2b/sandbox/...``) is looked up in the session's row
(runtime/services/session_holders):

- held here, or by nobody (a run's session): served here;
- held by a live server: forwarded to it, body and answer streamed both ways, with the
  caller's own headers (the holder authenticates the caller as usual); the forwarded request
  carries ``Onebox-Forwarded-By`` and ``Onebox-Forward-Proof`` (an HMAC of the time, the
  forwarding server, the method and the path under the cluster's secret, which only
  processes reading the database hold) and is never forwarded again. A request that says it
  was forwarded without a valid proof, or to a path that is not a session's, is refused
  (403); so is every forwarded request to a server outside the cluster: a ``--no-auth``
  server never joins one (it never registers, never accepts a forward);
- held by a server that stopped heartbeating: the session moves here (files from its newest
  snapshot) and the answer carries ``Onebox-Session-Moved`` saying so;
- held by a live server that does not answer: 503 with ``Retry-After``; the session moves
  only once its holder is past its lease, so two servers never both run it.

The address forwarded to is only ever one a server wrote for itself in
``onebox.api_servers``: nothing a caller sends names it. A path with a ``.`` or ``..``
segment (percent-encoded or not) or an empty one is refused (400) before any routing: it
would name one route here and another once a forward normalised it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import httpx
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from onebox.api.errors import body, with_headers
from onebox.api.hosts import scope_header
from onebox.api.state import ApiState
from onebox.runtime.services import session_holders as holders
from onebox.sandbox.sessions import serves
from onebox.store.db import Database

log = logging.getLogger(__name__)
FORWARDED_BY = b"onebox-forwarded-by"
FORWARD_PROOF = b"onebox-forward-proof"
SILENT_BEATS = 3  # heartbeats a holder may miss while a forwarded request waits for it
MOVED = b"onebox-session-moved"
_SESSION_PATH = re.compile(r"^/(?:v1/sessions|e2b(?:/v2)?/sandboxes)/([A-Za-z0-9_.-]{1,140})(?:/|$)")
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate",
                         b"proxy-authorization", b"te", b"trailer", b"transfer-encoding",
                         b"upgrade", b"host"})


def session_of(scope: Scope) -> str | None:
    """The session a request is about, or None."""
    path: str = scope.get("path", "")
    found = _SESSION_PATH.match(path)
    if found:
        return found.group(1)
    if path.startswith("/e2b/sandbox/"):
        value = scope_header(scope, b"e2b-sandbox-id")
        return value[:140] or None
    return None


class SessionRouter:
    """ASGI middleware: serve a session's request on its holder (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: ApiState | None = getattr(scope["app"].state, "onebox", None)
        if _dot_segments(scope.get("path", "")):
            await _refuse(scope, receive, send, 400, "bad_path", "a path with '.', '..' or "
                          "empty segments is not served: name the resource directly", None)
            return
        session_id = session_of(scope)
        if scope_header(scope, FORWARDED_BY) or scope_header(scope, FORWARD_PROOF):
            why = _forward_refusal(state, session_id, scope)
            if why is not None:
                await _refuse(scope, receive, send, 403, "forward_refused", why, None)
                return
        if state is not None and state.server is not None and not state.server.settled:
            await _settle(state, scope)
        if state is None or state.server is None or session_id is None:
            await self.app(scope, receive, send)
            return
        await self._route(state, session_id, scope, receive, send)

    async def _route(self, state: ApiState, session_id: str, scope: Scope, receive: Receive,
                     send: Send) -> None:
        me = state.server
        assert me is not None
        if time.monotonic() < state.local_is_mine_until \
                and serves(state.backend, session_id):
            await self.app(scope, receive, send)  # held here: no database query
            return
        lease_s = state.settings.api.server_lease_s
        holding = await holders.holder_of(state.db, session_id, lease_s)
        if holding is None or holding.holder in (None, me.id) or holding.status != "ACTIVE":
            await self.app(scope, receive, send)
            return
        holding = holders.checked_here(holding, me)
        forwarded = bool(scope_header(scope, FORWARDED_BY))
        if holding.alive:
            if forwarded:  # it moved again while the request travelled: the caller retries
                await _refuse(scope, receive, send, 503, "session_moving",
                              f"session {session_id} is moving between servers; retry", 1)
                return
            await self._forward(state, holding, scope, receive, send)
            return
        moved = await holders.move_here(state.db, state.objects(), state.backend, holding, me,
                                        lease_s)
        if moved is None:  # another server took it first: go there
            again = await holders.holder_of(state.db, session_id, lease_s)
            if again is not None and again.alive and again.holder != me.id and not forwarded:
                await self._forward(state, again, scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, with_headers(
            send, [(MOVED, moved.header().encode("latin-1", "replace"))]))

    async def _forward(self, state: ApiState, holding: holders.Holding, scope: Scope,
                       receive: Receive, send: Send) -> None:
        me = state.server
        assert me is not None and holding.url is not None
        client = state.forwarding_client()
        target = holding.url + scope.get("root_path", "") + scope["path"]
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP
                   and k.lower() not in (FORWARDED_BY, FORWARD_PROOF)]
        headers.append((FORWARDED_BY, me.id.encode()))
        assert state.cluster_key is not None, "a server that routes has joined"
        headers.append((FORWARD_PROOF, holders.forward_proof(
            state.cluster_key, me.id, scope["method"], scope["path"], time.time()).encode()))
        host = scope_header(scope, b"host")
        if host:
            headers.append((b"x-forwarded-host", host.encode("latin-1")))
        request = client.build_request(
            scope["method"], target, params=scope.get("query_string", b"").decode("latin-1"),
            headers=headers, content=_body(receive))
        try:
            response = await _watched(state, holding, client.send(request, stream=True))
        except (httpx.HTTPError, HolderSilent) as exc:
            log.warning("session %s: its server %s at %s did not answer: %s",
                        holding.session_id, holding.holder, holding.url, exc)
            retry = max(1, int(state.settings.api.server_lease_s))
            await _refuse(scope, receive, send, 503, "session_server_unreachable",
                          f"session {holding.session_id} lives on server {holding.holder}, "
                          "which does not answer; if it is gone the session moves to the "
                          f"server you reach after {retry} s (restored from its newest "
                          "snapshot)", retry)
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw
                                    if k.lower() not in _HOP_BY_HOP]})
            chunks = response.aiter_raw()
            while True:
                try:
                    chunk = await _watched(state, holding, anext(chunks))
                except StopAsyncIteration:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except HolderSilent as exc:  # the answer had started: all we can do is end it
            log.warning("session %s: its server %s stopped answering mid-response: %s",
                        holding.session_id, holding.holder, exc)
        finally:
            await response.aclose()


class HolderSilent(Exception):
    """The holder stopped heartbeating while a forwarded request waited for it."""


T = TypeVar("T")


async def _watched(state: ApiState, holding: holders.Holding, waiting: Awaitable[T]) -> T:
    """``waiting`` (a forwarded request's answer, or its next chunk), for as long as the
    holder heartbeats: a cell may run for minutes, a stream for hours, but a holder that is
    frozen (SIGSTOP, a hung host) stops heartbeating, and after ``SILENT_BEATS`` missed
    beats the wait ends with HolderSilent (a 503 with Retry-After), not at the client's
    own timeout."""
    task = asyncio.ensure_future(waiting)
    every = state.settings.api.server_heartbeat_s
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            now = await holders.holder_of(state.db, holding.session_id,
                                          state.settings.api.server_lease_s)
            silent = None if now is None else now.silent_s
            if silent is None or silent > SILENT_BEATS * every:
                raise HolderSilent(f"server {holding.holder} has not heartbeated for "
                                   f"{silent if silent is None else round(silent, 1)} s")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):  # swallow-ok: the cancelled wait's own end
                await task


def _dot_segments(path: str) -> bool:
    """Whether the (decoded) path has a '.', '..' or empty segment (a trailing '/' aside)."""
    parts = path.split("/")[1:]
    if parts and parts[-1] == "":
        parts = parts[:-1]
    return any(p in ("", ".", "..") for p in parts)


def _forward_refusal(state: ApiState | None, session_id: str | None, scope: Scope) -> str | None:
    """Why a request that says it was forwarded is refused, or None when it truly was."""
    if state is None or state.server is None or state.cluster_key is None:
        return ("this server takes no forwarded requests: it is not part of a cluster "
                "(a --no-auth server never is)")
    if session_id is None:
        return "only a session's requests are forwarded between servers"
    by, proof = scope_header(scope, FORWARDED_BY), scope_header(scope, FORWARD_PROOF)
    if not holders.forward_is_valid(state.cluster_key, by, scope["method"], scope["path"],
                                    proof, time.time()):
        return "the request says it was forwarded by a server of this cluster, without proof"
    return None


async def _settle(state: ApiState, scope: Scope) -> None:
    """The first request says where this server listens: advertise that address."""
    assert state.server is not None
    settled = holders.settled_at(state.server, scope.get("server"))
    if settled != state.server:
        state.server = settled
        await holders.register(state.db, settled)


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str,
                  message: str, retry_after_s: int | None) -> None:
    headers = {} if retry_after_s is None else {"Retry-After": str(retry_after_s)}
    response = JSONResponse(body(code, message, "session_id"), status_code=status,
                            headers=headers)
    await response(scope, receive, send)



async def join(state: ApiState) -> bool:
    """Record this server in ``onebox.api_servers`` (its sessions are routed to it), with
    the cluster's key. A server without API keys never joins: it says so, and returns False."""
    if not state.settings.api.auth:
        log.warning("this server runs without API keys: it serves its own sessions only and "
                    "never joins a cluster (no other server forwards to it, it accepts no "
                    "forwarded request)")
        return False
    state.cluster_key = await holders.cluster_key(state.db)
    state.server = holders.identity_for(state.settings)
    await _beat(state, holders.register)
    log.info("API server %s serves its sessions at %s", state.server.id, state.server.url)
    return True


async def keep_joined(state: ApiState, stop: asyncio.Event) -> None:
    """Heartbeat this server's row and drop local copies of sessions that moved or ended."""
    me = state.server
    assert me is not None
    every = state.settings.api.server_heartbeat_s
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if stop.is_set():
            return
        try:
            await _beat(state, holders.heartbeat)
        except Exception as exc:  # noqa: BLE001 - the database comes back; keep beating
            log.warning("API server %s could not heartbeat: %s (retrying)", me.id, exc,
                        exc_info=True)


async def _beat(state: ApiState,
                beat: Callable[[Database, holders.ServerIdentity], Awaitable[None]]) -> None:
    """Renew this server's row (``beat``: register or heartbeat), then drop the local copies
    of sessions held elsewhere or ended: every copy left is this server's own until its lease,
    counted from before the beat, is half over (another server may take a session only once
    this one has been silent for the whole lease), so requests for them skip the routing
    query until then. Monotonic time runs on while the process is frozen: a server that was
    stopped for a lease routes again until its next beat."""
    me = state.server
    assert me is not None
    started = time.monotonic()
    state.local_is_mine_until = 0.0
    await beat(state.db, me)
    await holders.sweep(state.db, state.backend, me)
    state.local_is_mine_until = started + state.settings.api.server_lease_s / 2


async def keep_snapshotted(state: ApiState, stop: asyncio.Event) -> None:
    """Snapshot the sessions held here that changed, every ``api.session_snapshot_s``, so a
    crash of this server loses at most that much of their files."""
    me, every = state.server, state.settings.api.session_snapshot_s
    assert me is not None
    while every > 0 and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        if stop.is_set():
            return
        try:
            await holders.checkpoint(state.db, state.objects(), state.backend, me)
        except Exception as exc:  # noqa: BLE001 - the next pass retries
            log.warning("API server %s could not snapshot its sessions: %s", me.id, exc,
                        exc_info=True)


async def leave(state: ApiState) -> None:
    """Before stopping: snapshot the sessions held here and leave the server table, so the
    next request for one of them, on any server, gets its files back."""
    if state.server is None:
        return
    try:
        saved = await holders.hand_off(state.db, state.objects(), state.backend, state.server)
    except Exception:  # noqa: BLE001 - stopping goes on; the sessions move after the lease
        log.exception("API server %s could not hand its sessions off", state.server.id)
        return
    if saved:
        log.info("API server %s snapshotted %d session(s) before stopping", state.server.id,
                 len(saved))
