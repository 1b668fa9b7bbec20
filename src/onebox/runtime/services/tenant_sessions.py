"""Sandbox sessions a tenant opens by hand (the session API), and the snapshots a tenant may
read: its runs' and its sessions'. Another tenant's rows are never returned.

Run sessions (touched by workers, released when their run ends) are :mod:`onebox.runtime.engine.sessions`.
"""

from __future__ import annotations

import uuid

from onebox.errors import TooManyRequests
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("tenant_sessions")


async def insert_session(db: Database, session_id: str, backend: str, tenant_id: str,
                         max_live: int) -> Row:
    """Record a new ACTIVE session of the tenant on this sandbox backend; returns its row.
    A tenant holding ``max_live`` live sessions already is refused (429)."""
    async with db.transaction() as conn:
        await conn.execute(Q["lock_tenant_sessions"], {"tenant_id": tenant_id})
        cur = await conn.execute(Q["insert_session"], {
            "id": session_id, "backend": backend, "tenant_id": tenant_id, "max_live": max_live})
        row: Row | None = await cur.fetchone()
    if row is None:
        raise TooManyRequests(
            f"tenant {tenant_id!r} holds {max_live} live sessions, the most one tenant may "
            "(ONEBOX_SANDBOX__MAX_SESSIONS_PER_TENANT); delete the ones it no longer needs "
            "(DELETE /v1/sessions/{id}, or kill E2B sandboxes) and try again",
            field="session", retry_after_s=5)
    return row


async def tenant_session(db: Database, session_id: str, tenant_id: str) -> Row | None:
    """The tenant's ACTIVE session with this id, or None (unknown, released or another's)."""
    return await db.fetchone(Q["tenant_session"], {"id": session_id, "tenant_id": tenant_id})


async def list_sessions(db: Database, tenant_id: str, limit: int) -> list[Row]:
    """The tenant's ACTIVE hand-made sessions (not runs'), newest first."""
    return await db.fetch(Q["list_sessions"], {"tenant_id": tenant_id, "limit": limit})


async def touch_session(db: Database, session_id: str) -> None:
    """Record that the session was used now (idle sessions are found by this time)."""
    await db.fetch(Q["touch_session"], {"id": session_id})


async def release_session(db: Database, session_id: str, tenant_id: str) -> None:
    """Mark the tenant's session RELEASED (nothing happens when it already is)."""
    await db.fetch(Q["release_session"], {"id": session_id, "tenant_id": tenant_id})


async def tenant_snapshots(
    db: Database, tenant_id: str, *, run_id: uuid.UUID | None, session_id: str | None,
    limit: int,
) -> list[Row]:
    """The tenant's snapshots, newest first, optionally of one run or one session."""
    return await db.fetch(Q["tenant_snapshots"], {
        "tenant_id": tenant_id, "run_id": run_id, "session_id": session_id, "limit": limit})


async def tenant_snapshot(db: Database, snapshot_id: uuid.UUID, tenant_id: str) -> Row | None:
    """The tenant's snapshot with this id, or None (unknown or another tenant's)."""
    return await db.fetchone(Q["tenant_snapshot"], {"id": snapshot_id, "tenant_id": tenant_id})
