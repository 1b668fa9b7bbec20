"""Every SSE stream gets its keep-alive comment, even while other runs' events flow and its own
run stays quiet (a client's read timeout must never fire on a healthy stream)."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from api_helpers import Api

from onebox.store import runs as store
from onebox.store.db import Database

QUIET_PLAN = {"steps": [{"id": "wait", "tool": "bash", "code": "true"}]}
HEARTBEAT_S = 0.4
WATCH_S = 4.0  # ten heartbeats: a stream that gets none of them is the bug, not a slow machine


async def _busy_writer(db: Database, run_id: uuid.UUID, stop: asyncio.Event) -> int:
    """Events for another run, a few dozen a second, until told to stop."""
    written = 0
    while not stop.is_set():
        async with db.transaction() as conn:
            await store.append_event(conn, run_id, "noise", {"i": written}, trace_id=None)
        written += 1
        await asyncio.sleep(0.02)
    return written


async def _count_keepalives(response: httpx.Response, stop: asyncio.Event) -> int:
    count = 0
    async for line in response.aiter_lines():
        if line.startswith(": keep-alive"):
            count += 1
        if stop.is_set():
            return count
    return count


async def test_a_quiet_stream_gets_keepalives_while_other_runs_are_busy(
    api_no_worker: Api,
) -> None:
    api_no_worker.settings.api.heartbeat_s = HEARTBEAT_S
    db = api_no_worker.rt.db
    async with api_no_worker.client() as c:
        quiet = (await c.post("/v1/runs", json={"plan": QUIET_PLAN})).json()["run_id"]
        busy = uuid.UUID((await c.post("/v1/runs", json={"plan": QUIET_PLAN})).json()["run_id"])
        stop = asyncio.Event()
        async with c.stream("GET", f"/v1/runs/{quiet}/events/stream") as response:
            counter = asyncio.create_task(_count_keepalives(response, stop))
            writer = asyncio.create_task(_busy_writer(db, busy, stop))
            await asyncio.sleep(WATCH_S)
            stop.set()
            written = await writer
            keepalives = await asyncio.wait_for(counter, 30)
    assert written > 50  # the other run really was busy the whole time
    assert keepalives >= 2, f"{keepalives} keep-alives in {WATCH_S} s (heartbeat {HEARTBEAT_S} s)"


async def test_keepalives_flow_while_a_long_transaction_of_another_run_holds_the_horizon(
    api_no_worker: Api,
) -> None:
    """A big submit (one long transaction) must not silence streams opened meanwhile: their
    first events wait for it, their keep-alives do not."""
    import psycopg

    api_no_worker.settings.api.heartbeat_s = HEARTBEAT_S
    db = api_no_worker.rt.db
    async with api_no_worker.client() as c:
        quiet = (await c.post("/v1/runs", json={"plan": QUIET_PLAN})).json()["run_id"]
        busy = uuid.UUID((await c.post("/v1/runs", json={"plan": QUIET_PLAN})).json()["run_id"])
        stop = asyncio.Event()
        async with await psycopg.AsyncConnection.connect(db.url) as long_writer:
            await long_writer.execute("INSERT INTO onebox.agent_events (run_id, type) "
                                      "VALUES (%s, 'held') RETURNING seq", (busy,))
            async with c.stream("GET", f"/v1/runs/{quiet}/events/stream") as response:
                counter = asyncio.create_task(_count_keepalives(response, stop))
                writer = asyncio.create_task(_busy_writer(db, busy, stop))
                await asyncio.sleep(WATCH_S)
                stop.set()
                await writer
                await long_writer.commit()
                keepalives = await asyncio.wait_for(counter, 30)
    assert keepalives >= 2, f"{keepalives} keep-alives in {WATCH_S} s (heartbeat {HEARTBEAT_S} s)"
