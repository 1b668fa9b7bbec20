"""The event hub on the real database: every event of a run exactly once, in order, for fast
and slow readers, while other runs write concurrently."""

from __future__ import annotations

import asyncio
import uuid

from onebox.api.events import EventHub, run_event_stream
from onebox.store import runs as store
from onebox.store.db import Database


async def _run(db: Database) -> uuid.UUID:
    run_id = uuid.uuid4()
    await db.fetch("INSERT INTO onebox.runs (id, trace_id, source, request) "
                   "VALUES (%s, %s, 'plan', '{}') RETURNING id", (run_id, "0" * 32))
    return run_id


async def _writer(db: Database, run_id: uuid.UUID, n: int, tag: str) -> list[int]:
    seqs = []
    for i in range(n):
        async with db.transaction() as conn:
            seqs.append(await store.append_event(conn, run_id, tag, {"i": i}, trace_id=None))
        await asyncio.sleep(0.003 * (i % 3))
    return seqs


async def _read(hub: EventHub, run_id: uuid.UUID, after: int, want: int, delay_s: float
                ) -> list[int]:
    got: list[int] = []
    stream = run_event_stream(hub, run_id, after, heartbeat_s=5)
    async for event in stream:
        if event is None:
            continue
        got.append(event["seq"])
        await asyncio.sleep(delay_s)
        if len(got) >= want:
            break
    await stream.aclose()
    return got


async def test_fast_and_slow_readers_get_every_event_once_in_order(db: Database) -> None:
    hub = EventHub(db, poll_s=0.02)
    for _ in range(4):  # a race shows up in some rounds only: several rounds catch it
        mine, other = await _run(db), await _run(db)
        first = await _writer(db, mine, 5, "before")  # already there when the readers connect
        readers = [asyncio.create_task(_read(hub, mine, 0, 5 + 60, delay)) for delay in (0, 0.01)]
        resumer = asyncio.create_task(_read(hub, mine, first[2], 2 + 60, 0))
        await asyncio.sleep(0.1)
        written, _ = await asyncio.gather(_writer(db, mine, 60, "live"),
                                          _writer(db, other, 60, "x"))
        expected = first + written
        fast, slow = await asyncio.wait_for(asyncio.gather(*readers), 60)
        assert fast == expected and slow == expected
        assert await asyncio.wait_for(resumer, 60) == expected[3:]
        assert hub.subscribers == 0
    await hub.close()


async def test_an_open_writer_holds_the_horizon_even_when_nothing_commits_after_it(
    db: Database,
) -> None:
    import psycopg

    hub = EventHub(db, poll_s=0.02)
    run_id = await _run(db)
    reader = asyncio.create_task(_read(hub, run_id, 0, 2, 0))
    await hub.ready_horizon()
    async with await psycopg.AsyncConnection.connect(db.url) as slow:
        cur = await slow.execute("INSERT INTO onebox.agent_events (run_id, type) "
                                 "VALUES (%s, 'held') RETURNING seq", (run_id,))
        held = (await cur.fetchone())[0]
        await asyncio.sleep(0.5)  # many polls while the only writer is open
        assert not reader.done()
        await slow.commit()
    later = await _writer(db, run_id, 1, "later")
    assert await asyncio.wait_for(reader, 30) == [held, *later]
    await hub.close()
