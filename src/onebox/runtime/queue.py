"""The PostgreSQL queue: claim ready attempts as leases, renew them, and recover expired ones.

A claim moves PENDING attempts to RUNNING with ``FOR UPDATE SKIP LOCKED``, sets
the lease (owner, expiry) and bumps the fencing token. A worker that stops
renewing loses the lease; the sweep marks that attempt FAILED ("worker lost")
and queues the next attempt, so a step that was running when its worker died
runs again with a new attempt number.
"""

from __future__ import annotations

import logging
import uuid

import psycopg

from onebox.config import Settings
from onebox.runtime.agent_engine import after_failure, is_agent_row
from onebox.runtime.archive import advance, step_payload
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)


async def claim_steps(
    db: Database, settings: Settings, owner: str, limit: int, *, run_id: uuid.UUID | None = None
) -> list[store.Row]:
    """Claim up to ``limit`` ready attempts; each comes back with its fencing token."""
    if limit <= 0:
        return []
    for attempt in range(3):
        try:
            return await _claim_once(db, settings, owner, limit, run_id)
        except psycopg.errors.DeadlockDetected:
            log.info("claim hit a deadlock with a concurrent cancel; retrying (%d)", attempt + 1)
    return []


async def _claim_once(
    db: Database, settings: Settings, owner: str, limit: int, run_id: uuid.UUID | None
) -> list[store.Row]:
    async with db.transaction() as conn:
        # A claim need not wait for its WAL flush: if the server crashes before the flush, the
        # attempts are PENDING again and the worker's later writes carry a fencing token the
        # database never saw, so they are refused. Results (archive) stay synchronous.
        await conn.execute("SET LOCAL synchronous_commit TO OFF")
        return await store.fetch_all(conn, "claim_steps", {
            "owner": owner, "limit": limit, "lease_s": settings.runtime.lease_s, "run_id": run_id})


async def renew_leases(
    db: Database, settings: Settings, owner: str, ids: list[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """Extend the leases this worker still holds; returns {execution_id: run status}.

    An id missing from the answer is a lease this worker has lost.
    """
    if not ids:
        return {}
    async with db.connection() as conn:
        rows = await store.fetch_all(conn, "renew_leases", {
            "ids": ids, "owner": owner, "lease_s": settings.runtime.lease_s})
    return {r["id"]: r["run_status"] for r in rows}


async def sweep_expired(db: Database, settings: Settings, *, limit: int = 100) -> int:
    """Recover attempts whose lease expired; returns how many were recovered."""
    async with db.connection() as conn:
        expired = await store.fetch_all(conn, "expired_leases", {"limit": limit})
    recovered = 0
    for item in expired:
        recovered += await _recover(db, settings, item["id"], item["run_id"])
    return recovered


async def _recover(db: Database, settings: Settings, execution_id: uuid.UUID, run_id: uuid.UUID) -> int:
    async with db.transaction() as conn:
        run = await store.fetch_one(conn, "lock_run", {"run_id": run_id})
        row = await store.fetch_one(conn, "expire_step", {
            "id": execution_id, "error": "lease expired: the worker running this attempt was lost"})
        if row is None or run is None:
            return 0
        await store.append_event(conn, run_id, "step_lease_expired", step_payload(row),
                                 trace_id=row["trace_id"], session_id=row["session_id"],
                                 execution_id=row["id"])
        if run["status"] in store.TERMINAL_RUN_STATES:
            pass
        elif is_agent_row(row):
            await after_failure(conn, run, row, delay_s=0.0)
        else:
            await advance(conn, settings, run, row, backoff=False)
        log.warning("recovered step %s attempt %s of run %s after its lease expired",
                    row["step_id"], row["attempt"], run_id)
        return 1


async def release_leases(db: Database, owner: str, ids: list[uuid.UUID]) -> None:
    """Give up leases now (drain): the next sweep, by any worker, re-queues those steps."""
    if ids:
        async with db.connection() as conn:
            await store.execute(conn, "release_leases", {"ids": ids, "owner": owner})
