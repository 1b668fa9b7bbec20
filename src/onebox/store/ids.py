"""Run, step-execution and thread ids found by the range their prefix spans (see ``sql/ids.sql``)."""

from __future__ import annotations

import uuid
from typing import Literal

from onebox.store.db import Conn
from onebox.store.queries import load_queries

Q = load_queries("ids")
IdKind = Literal["run", "execution", "thread"]


async def ids_between(
    conn: Conn, kind: IdKind, lo: uuid.UUID, hi: uuid.UUID, *, tenant_id: str | None, limit: int
) -> list[uuid.UUID]:
    """Ids of ``kind`` in ``[lo, hi]``, smallest first, at most ``limit`` of them."""
    cur = await conn.execute(Q[f"{kind}_ids_between"], {
        "lo": lo, "hi": hi, "tenant_id": tenant_id, "limit": limit})
    return [row["id"] for row in await cur.fetchall()]
