"""The event log as live streams read it: the safe horizon's inputs, and events between
two sequence numbers (``store/sql/events.sql``).

The poller of :class:`onebox.api.events.EventHub` reads on a connection of its own, so the
first two functions take a connection; a subscriber's backfill takes the pool.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from onebox.store import runs as store
from onebox.store.db import Conn, Database, Row
from onebox.store.queries import load_queries

Q = load_queries("events")


@dataclass(frozen=True)
class HorizonProbe:
    """The event sequence's last value, the database clock just after reading it (epoch
    seconds), and the transactions running then: xid -> start time (epoch seconds)."""

    top: int
    at_s: float
    running: dict[str, float]


async def horizon_probe(conn: Conn) -> HorizonProbe:
    """One probe of the sequence and the running transactions (any role onebox connects as:
    a snapshot's xip omits running ids above its xmax, pg_stat_activity does not)."""
    cur = await conn.execute(Q["event_horizon"])
    row = await cur.fetchone()
    assert row is not None  # one row: the sequence's
    top = int(row["last_value"]) if row["is_called"] else 0
    return HorizonProbe(top, float(row["at_s"]), dict(row["running"]))


async def events_between(conn: Conn, after: int, upto: int) -> list[Row]:
    """Every event with after < seq <= upto, of every run, in seq order."""
    cur = await conn.execute(Q["events_between"], {"after": after, "upto": upto})
    return list(await cur.fetchall())


async def run_events_between(
    db: Database, run_id: uuid.UUID, after: int, upto: int, limit: int,
) -> list[Row]:
    """At most ``limit`` events of one run with after < seq <= upto, in seq order."""
    return await db.fetch(Q["run_events_between"], {
        "run_id": run_id, "after": after, "upto": upto, "limit": limit})


async def run_events(db: Database, run_id: uuid.UUID, *, after_seq: int = 0) -> list[Row]:
    """A run's events after ``after_seq``, in order."""
    async with db.connection() as conn:
        return await store.fetch_all(conn, "run_events", {"run_id": run_id, "after_seq": after_seq})
