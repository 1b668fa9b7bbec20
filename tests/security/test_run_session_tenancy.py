"""A run's sandbox session belongs to the run's tenant: the sessions service (behind
`onebox exec`, MCP and the E2B endpoints, which take any session id) must not hand tenant
`default` the live workspace of another tenant's run."""

from __future__ import annotations

import uuid

import pytest

from onebox.errors import NotFound
from onebox.runtime.engine.sessions import touch_session
from onebox.runtime.services import session_service
from onebox.store.db import Database


async def _run_of(db: Database, tenant_id: str) -> uuid.UUID:
    row = await db.fetchone(
        "INSERT INTO onebox.runs (id, status, request, tenant_id, trace_id, source) "
        "VALUES (gen_random_uuid(), 'RUNNING', '{}'::jsonb, %(t)s, 'trace', 'plan') RETURNING id",
        {"t": tenant_id})
    assert row is not None
    return uuid.UUID(str(row["id"]))


async def test_a_run_session_is_its_runs_tenants_only(db: Database) -> None:
    run_id = await _run_of(db, "acme")
    session_id = f"run-{run_id}"
    async with db.transaction() as conn:
        await touch_session(conn, session_id, run_id, "linux")
    assert (await session_service.require_session(db, session_id, "acme"))["id"] == session_id
    with pytest.raises(NotFound):
        await session_service.require_session(db, session_id, "default")
