"""Revoking a key ends its open streams: a run's SSE stream, an MCP HTTP stream and an E2B
command's output stream.

A stream opened with a key keeps the key's rights only while the key is active: once it is
revoked the stream ends within the keep-alive interval (not at the run's end, nor never),
and no event emitted after the revocation reaches it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from test_e2b_tenancy import _serving

from onebox.api import create_app
from onebox.config import Settings
from onebox.mcp.state import McpState
from onebox.mcp.transports import http_app
from onebox.runtime.services.api_keys import create_key, revoke_key
from onebox.runtime.services.service import Runtime
from onebox.store import runs as store
from onebox.store.db import Database

PLAN = {"steps": [{"id": "wait", "tool": "bash", "code": "true"}]}
HEARTBEAT_S = 1.0
MARGIN_S = 14.0  # far below key_recheck_s (20): a stream that waits for it is the bug


async def _emit(db: Database, run_id: uuid.UUID, kind: str) -> None:
    async with db.transaction() as conn:
        await store.append_event(conn, run_id, kind, {"kind": kind}, trace_id=None)


async def _until(lines: AsyncIterator[str], text: str) -> list[str]:
    seen = []
    async for line in lines:
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"the stream ended before {text!r}: {seen}")


async def test_a_run_stream_ends_at_revocation_and_gets_no_later_event(
    settings: Settings, rt: Runtime, db: Database,
) -> None:
    settings.api.heartbeat_s, settings.api.key_recheck_s = HEARTBEAT_S, 20.0
    key, row = await create_key(db, tenant_id="acme", name="watcher")
    async with _serving(create_app(settings, runtime=rt)) as url, httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        run_id = uuid.UUID((await c.post("/v1/runs", json={"plan": PLAN})).json()["run_id"])
        async with c.stream("GET", f"/v1/runs/{run_id}/events/stream") as response:
            lines = response.aiter_lines()
            await _emit(db, run_id, "before_revocation")
            await asyncio.wait_for(_until(lines, "before_revocation"), 60)  # the stream is live
            await revoke_key(db, row["prefix"])
            for _ in range(3):
                await _emit(db, run_id, "after_revocation")
            rest = await asyncio.wait_for(_drain(lines), HEARTBEAT_S + MARGIN_S)
    assert "event: revoked" in rest, rest
    assert not [line for line in rest if "after_revocation" in line], rest


async def _drain(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines]


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-03-26", "capabilities": {},
    "clientInfo": {"name": "revocation-test", "version": "1"}}}
ACCEPT = "application/json, text/event-stream"


async def test_an_mcp_http_stream_ends_at_revocation(
    settings: Settings, rt: Runtime, db: Database,
) -> None:
    settings.api.key_recheck_s = HEARTBEAT_S
    key, row = await create_key(db, tenant_id="acme", name="mcp watcher")
    state = McpState(settings, rt, auth=True)
    async with _serving(http_app(state, "127.0.0.1")) as url, httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        init = await c.post("/mcp", json=INIT, headers={"Accept": ACCEPT})
        assert init.status_code == 200, init.text
        session = {"mcp-session-id": init.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-03-26"}
        done = await c.post("/mcp", headers={"Accept": ACCEPT, **session},
                            json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert done.status_code == 202, done.text
        async with c.stream("GET", "/mcp", headers={"Accept": "text/event-stream",
                                                     **session}) as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            ping = asyncio.ensure_future(_drain(lines))
            await asyncio.sleep(HEARTBEAT_S * 2)
            assert not ping.done(), "the stream ended before the key was revoked"
            await revoke_key(db, row["prefix"])
            rest = await asyncio.wait_for(ping, HEARTBEAT_S + MARGIN_S)
        assert not [line for line in rest if line.startswith("data:") and "result" in
                    json.loads(line[5:] or "{}")], rest
        after = await c.post("/mcp", json=INIT, headers={"Accept": ACCEPT})
        assert after.status_code == 401


TICKER = "for i in $(seq 1 600); do echo tick-$i; sleep 0.1; done"


async def _frames(response: httpx.Response) -> AsyncIterator[dict]:
    """The Connect envelopes of a server stream, decoded (flags byte, length, JSON)."""
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        while len(buffer) >= 5 and len(buffer) >= 5 + int.from_bytes(buffer[1:5], "big"):
            size = int.from_bytes(buffer[1:5], "big")
            yield json.loads(buffer[5:5 + size] or b"{}")
            buffer = buffer[5 + size:]


async def _revoked_mid_stream(items: AsyncIterator[Any], ticking: Callable[[Any], bool],
                              revoke: Callable[[], Awaitable[object]]) -> tuple[list[Any], int]:
    """Read a stream until ``ticking`` says it runs, revoke the key, read what follows for
    a recheck and the margin: everything seen, and how much came before the revocation."""
    seen: list[Any] = []

    async def until_ticking() -> None:
        async for item in items:
            seen.append(item)
            if ticking(item):
                return

    await asyncio.wait_for(until_ticking(), 60)
    await revoke()
    revoked_at = len(seen)

    async def rest() -> None:
        async for item in items:
            seen.append(item)

    await asyncio.wait_for(rest(), 1.0 + MARGIN_S)
    return seen, revoked_at


async def test_an_e2b_process_stream_ends_at_revocation(
    settings: Settings, rt: Runtime, db: Database,
) -> None:
    """A command's output streamed through the E2B door with an API key stops within
    api.key_recheck_s of the key's revocation, while the command still prints."""
    from onebox.api.e2b.connect import envelope

    settings.api.key_recheck_s = 1.0
    key, row = await create_key(db, tenant_id="acme", name="e2b-watcher")
    async with _serving(create_app(settings, runtime=rt)) as url, httpx.AsyncClient(
            base_url=url, timeout=60) as c:
        made = (await c.post("/e2b/v2/sandboxes", json={}, headers={"X-API-Key": key})).json()
        start = envelope({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", TICKER]}})
        headers = {"E2b-Sandbox-Id": made["sandboxID"], "E2b-Sandbox-Port": "49983",
                   "X-Access-Token": key, "Content-Type": "application/connect+json"}
        async with c.stream("POST", "/e2b/sandbox/process.Process/Start", content=start,
                            headers=headers) as response:
            seen, revoked_at = await _revoked_mid_stream(
                _frames(response), lambda f: "tick-3" in json.dumps(f)
                or "dGljay0z" in json.dumps(f), lambda: revoke_key(db, row["prefix"]))
            assert seen, (response.status_code, response.headers)
    ended = seen[-1]
    assert ended.get("error", {}).get("code") == "unauthenticated", ended
    assert len(seen) - revoked_at < 100, "the stream kept going long after the revocation"


CELL = "import time\nfor i in range(600):\n    print(f'tick-{i}', flush=True)\n    time.sleep(0.1)\n"


async def test_an_e2b_cell_stream_ends_at_revocation(
    settings: Settings, rt: Runtime, db: Database,
) -> None:
    """Issue 37, case 5: the code interpreter's /execute stream ran on 33-35 s after its
    key was revoked; it ends within api.key_recheck_s, as the process streams do."""
    settings.api.key_recheck_s = 1.0
    key, row = await create_key(db, tenant_id="acme", name="cell-watcher")
    async with _serving(create_app(settings, runtime=rt)) as url, httpx.AsyncClient(
            base_url=url, timeout=60) as c:
        made = (await c.post("/e2b/v2/sandboxes", json={"templateID": "code-interpreter-v1"},
                             headers={"X-API-Key": key})).json()
        headers = {"E2b-Sandbox-Id": made["sandboxID"], "E2b-Sandbox-Port": "49999",
                   "X-Access-Token": key}
        async with c.stream("POST", "/e2b/sandbox/execute", json={"code": CELL},
                            headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            seen, revoked_at = await _revoked_mid_stream(
                response.aiter_lines(), lambda line: "tick-3" in line,
                lambda: revoke_key(db, row["prefix"]))
    assert "Unauthorized" in seen[-1], seen[-3:]
    assert len(seen) - revoked_at < 100, "the stream kept going long after the revocation"
