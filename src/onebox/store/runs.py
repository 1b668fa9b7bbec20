"""Runs, plans, step attempts, sessions and the event log: the run aggregate.

Functions take an open connection so that callers decide the transaction:
every state change and its event are written in one.
"""

from __future__ import annotations

import uuid
from typing import Any

from psycopg.types.json import Jsonb

from onebox.store.db import Conn, Row
from onebox.store.queries import load_queries

Q = load_queries("runs")

TERMINAL_RUN_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "DEAD"})


async def append_event(
    conn: Conn,
    run_id: uuid.UUID | None,
    type: str,
    payload: dict[str, Any],
    *,
    trace_id: str | None,
    session_id: str | None = None,
    execution_id: uuid.UUID | None = None,
) -> int:
    """Append one event; returns its sequence number. Call inside the state change's transaction."""
    cur = await conn.execute(
        Q["insert_event"],
        {"run_id": run_id, "session_id": session_id, "trace_id": trace_id,
         "execution_id": execution_id, "type": type, "payload": Jsonb(payload)},
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["seq"])


async def fetch_all(conn: Conn, name: str, params: dict[str, Any]) -> list[Row]:
    cur = await conn.execute(Q[name], params)
    return list(await cur.fetchall())


async def fetch_one(conn: Conn, name: str, params: dict[str, Any]) -> Row | None:
    cur = await conn.execute(Q[name], params)
    row: Row | None = await cur.fetchone()
    return row


async def execute(conn: Conn, name: str, params: dict[str, Any]) -> int:
    cur = await conn.execute(Q[name], params)
    return cur.rowcount


