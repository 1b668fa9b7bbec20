"""The PostgreSQL queue: claim ready attempts as leases, renew them, and recover expired ones.

A claim moves PENDING attempts to RUNNING with ``FOR UPDATE SKIP LOCKED``, sets
the lease (owner, expiry) and bumps the fencing token. A worker that stops
renewing loses the lease; the sweep marks that attempt FAILED ("worker lost")
and queues the next attempt, so a step that was running when its worker died
runs again with a new attempt number.

Lock order. Every transaction that touches a run and its attempts takes the run row
first, then the attempts: cancel (``lock_run`` FOR UPDATE, then its queued attempts),
archive (``lock_run_for_archive``, then the fenced attempt), lease recovery
(``lock_run``, then ``expire_step``), approvals and retries alike. A claim locks each
run row (FOR KEY SHARE) before its attempts (FOR UPDATE), both SKIP LOCKED: it never
waits for a cancel or a recovery (their FOR UPDATE makes it skip that run) nor blocks an
archive (KEY SHARE does not conflict with an update of the run's other columns). Its
one wait, starting a PENDING run, is for another claim doing the same, in run id order.
So no path waits for a lock held by one waiting for it; PostgreSQL may still roll one
back (a deadlock involving other statements, a serialization failure), and claim,
cancel, archive and recovery all retry that through ``onebox.store.retry``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection

from onebox.config import Settings
from onebox.errors import StorageError
from onebox.runtime.engine import kinds
from onebox.runtime.engine.archive import step_payload
from onebox.store import runs as store
from onebox.store.db import Database
from onebox.store.retry import retry_rollbacks

log = logging.getLogger(__name__)
LOST = "lease expired: the worker running this attempt was lost"


async def claim_steps(
    db: Database, settings: Settings, owner: str, limit: int, *, run_id: uuid.UUID | None = None,
    models: Collection[str] = (),
) -> list[store.Row]:
    """Claim up to ``limit`` ready attempts; each comes back with its fencing token.

    A claim the database keeps rolling back claims nothing this time (the attempts stay
    queued for the next poll).
    """
    if limit <= 0:
        return []
    try:
        return await retry_rollbacks(
            f"claim by {owner}", lambda: _claim_once(db, settings, owner, limit, run_id, models))
    except StorageError as exc:
        log.warning("%s; claiming again at the next poll", exc)
        return []


async def _claim_once(
    db: Database, settings: Settings, owner: str, limit: int, run_id: uuid.UUID | None,
    models: Collection[str],
) -> list[store.Row]:
    async with db.transaction() as conn:
        # A claim need not wait for its WAL flush: if the server crashes before the flush, the
        # attempts are PENDING again and the worker's later writes carry a fencing token the
        # database never saw, so they are refused. Results (archive) stay synchronous.
        await conn.execute("SET LOCAL synchronous_commit TO OFF")
        return await store.fetch_all(conn, "claim_steps", {
            "owner": owner, "limit": limit, "lease_s": settings.runtime.lease_s, "run_id": run_id,
            "models": list(models)})


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
    return await retry_rollbacks(f"lease recovery of attempt {execution_id}",
                                 lambda: _recover_once(db, settings, execution_id, run_id))


async def _recover_once(
    db: Database, settings: Settings, execution_id: uuid.UUID, run_id: uuid.UUID
) -> int:
    async with db.transaction() as conn:
        run = await store.fetch_one(conn, "lock_run", {"run_id": run_id})
        row = await store.fetch_one(conn, "expire_step", {"id": execution_id, "error": LOST})
        if row is None or run is None:
            return 0
        row = await _not_counted(conn, settings, row)
        await store.append_event(conn, run_id, "step_lease_expired", step_payload(row),
                                 trace_id=row["trace_id"], session_id=row["session_id"],
                                 execution_id=row["id"])
        if run["status"] not in store.TERMINAL_RUN_STATES:
            await kinds.kind_of(row).lost(conn, settings, run, row)
        log.warning("recovered step %s attempt %s of run %s after its lease expired",
                    row["step_id"], row["attempt"], run_id)
        return 1


async def _not_counted(conn: store.Conn, settings: Settings, row: store.Row) -> store.Row:
    """A lost worker is not the step's failure: the attempt it held does not count against
    the step's ``max_attempts`` (its retry gets one more), up to
    ``runtime.max_lease_losses`` losses of the step, past which they count again (a step
    that kills every worker that runs it must still end)."""
    lost = await store.fetch_one(conn, "lease_losses", {
        "run_id": row["run_id"], "step_id": row["step_id"], "error": LOST})
    if lost is not None and lost["n"] > settings.runtime.max_lease_losses:
        return row
    return {**row, "max_attempts": row["max_attempts"] + 1}


async def release_leases(db: Database, owner: str, ids: list[uuid.UUID]) -> None:
    """Give up leases now (drain): the next sweep, by any worker, re-queues those steps."""
    if ids:
        async with db.connection() as conn:
            await store.execute(conn, "release_leases", {"ids": ids, "owner": owner})
