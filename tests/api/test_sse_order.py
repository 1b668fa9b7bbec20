"""Events whose transactions commit out of seq order still reach SSE subscribers gap-free, in order."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
from api_helpers import Api, read_sse

INSERT = ("INSERT INTO onebox.agent_events (run_id, type, payload) VALUES (%s, %s, '{}') "
          "RETURNING seq")


async def test_a_later_seq_committed_first_is_held_back_until_the_earlier_one_commits(
    api_no_worker: Api,
) -> None:
    db = api_no_worker.rt.db
    async with api_no_worker.client() as c:
        run_id = (await c.post("/v1/runs", json={"plan": {"steps": [
            {"id": "a", "tool": "bash", "code": "true"}]}})).json()["run_id"]
        received: list[dict] = []
        async with c.stream("GET", f"/v1/runs/{run_id}/events/stream") as response:

            async def consume() -> None:
                received.extend(await read_sse(response, until="late_b"))

            reader = asyncio.create_task(consume())
            async with await psycopg.AsyncConnection.connect(db.url) as slow:
                cur = await slow.execute(INSERT, (run_id, "early_a"))
                seq_a = (await cur.fetchone())[0]
                async with await psycopg.AsyncConnection.connect(db.url, autocommit=True) as fast:
                    cur = await fast.execute(INSERT, (run_id, "late_b"))
                    seq_b = (await cur.fetchone())[0]
                assert seq_a < seq_b
                await asyncio.sleep(1.0)  # many polls: late_b is committed but must wait
                assert not reader.done()
                await slow.commit()
            await asyncio.wait_for(reader, 30)
            with contextlib.suppress(Exception):
                reader.cancel()
    types = [e["event"] for e in received]
    assert types[-2:] == ["early_a", "late_b"], types
    ids = [e["id"] for e in received]
    assert ids == sorted(set(ids))
