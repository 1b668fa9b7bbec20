"""Every query a heartbeat, a claim poll or a metrics scrape runs can use an index.

With sequential scans disabled, the planner still picks a plain scan of a table when no
index fits; so "no Seq Scan on <table>" in the plan proves an index serves the query.
"""

from __future__ import annotations

import uuid

import pytest

from onebox.store.db import Database
from onebox.store.queries import load_queries

RUNS, METRICS = load_queries("runs"), load_queries("metrics")
ANY_RUN = uuid.uuid4()

CASES = {
    "finished_sessions": (RUNS["finished_sessions"], {"run_id": None},
                          ("sessions", "task_execution")),
    "metrics_sessions": (METRICS["metrics_sessions"], {"tenant_id": "acme"}, ("sessions",)),
    "metrics_blocked": (METRICS["metrics_blocked"], {"tenant_id": "acme"}, ("agent_events",)),
    "delete_unshared_pre (its attempt lookup)": (
        "SELECT 1 FROM onebox.task_execution t WHERE t.id <> %(id)s"
        " AND (t.pre_snapshot_id = %(sid)s OR t.snapshot_id = %(sid)s)",
        {"id": ANY_RUN, "sid": ANY_RUN}, ("task_execution",)),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_the_query_uses_an_index(db: Database, name: str) -> None:
    sql, params, tables = CASES[name]
    async with db.connection() as conn:
        await conn.execute("SET enable_seqscan = off")
        cur = await conn.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row["QUERY PLAN"] for row in await cur.fetchall())
        await conn.execute("RESET enable_seqscan")
    for table in tables:
        assert f"Seq Scan on {table}" not in plan, plan
