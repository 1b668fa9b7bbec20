"""Figures for monitoring: the machine's load (no tenant in it) and one tenant's own counts,
each answered by one named query of ``store/sql/metrics.sql``.

The Prometheus text itself is drawn by :mod:`onebox.api.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass

from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("metrics")
BUCKETS_MS = (10, 50, 100, 500, 1000, 5000, 30000, 300000)


@dataclass(frozen=True)
class QueueTotals:
    """Step attempts waiting to be claimed, waiting for a person, and running now."""

    queued: int
    waiting: int
    running: int


async def database_answers(db: Database) -> None:
    """Raise unless the database answers a trivial query (readiness)."""
    await db.fetchone(Q["ping"])


async def queue_totals(db: Database) -> QueueTotals:
    """The queue's load over every tenant: what the operator of the machine watches."""
    row = await db.fetchone(Q["metrics_queue"]) or {}
    return QueueTotals(int(row.get("queued") or 0), int(row.get("waiting") or 0),
                       int(row.get("running") or 0))


async def runs_by_status(db: Database, tenant_id: str) -> dict[str, int]:
    """How many of the tenant's runs are in each status (statuses with none are absent)."""
    rows = await db.fetch(Q["metrics_runs"], {"tenant_id": tenant_id})
    return {str(r["status"]): int(r["n"]) for r in rows}


async def active_sessions(db: Database, tenant_id: str) -> int:
    """How many of the tenant's sessions are recorded as ACTIVE."""
    row = await db.fetchone(Q["metrics_sessions"], {"tenant_id": tenant_id}) or {}
    return int(row.get("n") or 0)


async def step_durations(db: Database, tenant_id: str) -> list[Row]:
    """Per final status of the tenant's finished step attempts: ``n``, ``total_ms`` and the
    cumulative count ``le_<ms>`` of each bound of :data:`BUCKETS_MS`."""
    return await db.fetch(Q["metrics_durations"], {"tenant_id": tenant_id})


async def blocked_network_attempts(db: Database, tenant_id: str) -> int:
    """How many connections the egress proxy refused in the tenant's runs."""
    row = await db.fetchone(Q["metrics_blocked"], {"tenant_id": tenant_id}) or {}
    return int(row.get("n") or 0)
