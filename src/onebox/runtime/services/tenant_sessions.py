"""Sandbox sessions a tenant opens by hand (the session API), and the snapshots a tenant may
read: its runs' and its sessions'. Another tenant's rows are never returned.

Run sessions (touched by workers, released when their run ends) are :mod:`onebox.runtime.engine.sessions`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from psycopg.types.json import Jsonb

from onebox.errors import TooManyRequests
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("tenant_sessions")


@dataclass(frozen=True)
class E2bFields:
    """What an E2B sandbox adds to its session row."""

    template: str
    metadata: dict[str, str]
    envs: dict[str, str]
    timeout_s: int


async def insert_session(db: Database, session_id: str, backend: str, tenant_id: str,
                         max_live: int, *, holder: str | None = None,
                         owner: str | None = None, e2b: E2bFields | None = None) -> Row:
    """Record a new ACTIVE session of the tenant on this sandbox backend; returns its row.
    ``holder``: the API server whose sandbox has it (session_holders). ``owner``: the local
    process that ends it when its call does (engine.sessions reclaims it if that process
    dies first). A tenant holding ``max_live`` live sessions already is refused (429)."""
    async with db.transaction() as conn:
        await conn.execute(Q["lock_tenant_sessions"], {"tenant_id": tenant_id})
        cur = await conn.execute(Q["insert_session"], {
            "id": session_id, "backend": backend, "tenant_id": tenant_id, "max_live": max_live,
            "holder": holder, "owner": owner, "e2b_template": None if e2b is None else e2b.template,
            "e2b_metadata": None if e2b is None else Jsonb(e2b.metadata),
            "e2b_envs": None if e2b is None else Jsonb(e2b.envs),
            "timeout_s": None if e2b is None else e2b.timeout_s})
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


async def e2b_session(db: Database, session_id: str, tenant_id: str) -> Row | None:
    """The tenant's live session with its E2B fields, or None."""
    return await db.fetchone(Q["e2b_session"], {"id": session_id, "tenant_id": tenant_id})


async def e2b_sessions(db: Database, tenant_id: str, metadata: dict[str, str],
                       limit: int) -> list[Row]:
    """The tenant's live hand-made sessions whose E2B metadata holds every pair given."""
    return await db.fetch(Q["e2b_sessions"], {"tenant_id": tenant_id, "limit": limit,
                                              "metadata": Jsonb(metadata)})


async def set_end_at(db: Database, session_id: str, tenant_id: str, timeout_s: int,
                     extend_only: bool = False) -> Row | None:
    """The session now ends ``timeout_s`` from now (``extend_only``: or later, when it already
    would); its row, or None when it is gone."""
    query = Q["extend_end_at"] if extend_only else Q["set_end_at"]
    return await db.fetchone(query, {"id": session_id, "tenant_id": tenant_id,
                                     "timeout_s": timeout_s})


async def expired_sessions(db: Database, me: str | None, lease_s: float) -> list[Row]:
    """Live sessions past their deadline this server may end (its own, unheld ones, and
    those of a holder that stopped heartbeating)."""
    return await db.fetch(Q["expired_sessions"], {"me": me, "lease_s": lease_s})
