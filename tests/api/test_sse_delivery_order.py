"""The hub waits only for transactions that began before a candidate was taken (runs submitted
meanwhile do not delay delivery); that must never publish past a seq still uncommitted. Many
rounds of writers that begin, draw their seq and commit at jittered moments, in every order
relative to the hub's polls: one stream sees every event exactly once, in seq order."""

from __future__ import annotations

import asyncio
import random
import uuid

import psycopg

from onebox.api.events import EventHub, run_event_stream
from onebox.store.db import Database

ROUNDS = 200
WRITERS = 3


async def _run(db: Database) -> uuid.UUID:
    run_id = uuid.uuid4()
    await db.fetch("INSERT INTO onebox.runs (id, trace_id, source, request) "
                   "VALUES (%s, %s, 'plan', '{}') RETURNING id", (run_id, "0" * 32))
    return run_id


async def _jittered_writer(conn: psycopg.AsyncConnection[object], run_id: uuid.UUID,
                           rng: random.Random) -> int:
    """BEGIN, wait 0-15 ms, draw a seq (INSERT), wait 0-80 ms (past the hub's grace),
    COMMIT: commits land out of seq order and on both sides of the hub's polls."""
    await conn.execute("BEGIN")
    await asyncio.sleep(rng.random() * 0.015)
    cur = await conn.execute("INSERT INTO onebox.agent_events (run_id, type) "
                             "VALUES (%s, 'jitter') RETURNING seq", (run_id,))
    row = await cur.fetchone()
    assert row is not None
    await asyncio.sleep(rng.random() * 0.08)
    await conn.execute("COMMIT")
    return int(row[0])  # type: ignore[index]


async def _collect(hub: EventHub, run_id: uuid.UUID, want: int) -> list[int]:
    got: list[int] = []
    async for event in run_event_stream(hub, run_id, 0, heartbeat_s=5):
        if event is not None:
            got.append(event["seq"])
            if len(got) >= want:
                return got
    return got


async def test_out_of_order_commits_reach_a_stream_gap_free_over_many_rounds(
    db: Database,
) -> None:
    rng = random.Random(12)
    hub = EventHub(db, poll_s=0.01)
    run_id = await _run(db)
    reader = asyncio.create_task(_collect(hub, run_id, ROUNDS * WRITERS))
    await hub.ready_horizon()
    conns = [await psycopg.AsyncConnection.connect(db.url, autocommit=True)
             for _ in range(WRITERS)]
    written: list[int] = []
    try:
        for _ in range(ROUNDS):
            written += await asyncio.gather(*(_jittered_writer(c, run_id, rng) for c in conns))
        got = await asyncio.wait_for(reader, 60)
    finally:
        for conn in conns:
            await conn.close()
        await hub.close()
    assert got == sorted(written)
