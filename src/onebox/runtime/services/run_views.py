"""Reads of runs for the API and the CLI: whose run it is, a search, and what a run's detail
shows besides its steps (plan versions, model calls, warnings, approvals waiting).

Every function answers one question with one named query of ``store/sql/run_views.sql``;
shaping rows into a response is the caller's business.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from onebox.runtime.engine.submit import run_session_id
from onebox.store.db import Database, Row
from onebox.store.queries import load_queries

Q = load_queries("run_views")


async def run_tenant(db: Database, run_id: uuid.UUID) -> str | None:
    """The tenant that owns the run, or None when no run has this id."""
    row = await db.fetchone(Q["run_tenant"], {"run_id": run_id})
    return None if row is None else str(row["tenant_id"])


async def run_session(db: Database, run_id: uuid.UUID, tenant_id: str) -> str | None:
    """The sandbox session that holds the run's workspace (a thread's turns share the
    thread's), or None when the tenant has no such run."""
    row = await db.fetchone(Q["run_session"], {"run_id": run_id, "tenant_id": tenant_id})
    return None if row is None else run_session_id(row)


async def search_runs(
    db: Database, tenant_id: str, *, statuses: list[str] | None, since: datetime | None,
    until: datetime | None, text: str | None, before: datetime | None, limit: int,
) -> list[Row]:
    """The tenant's runs, newest first, with step counts; ``text`` is matched literally in
    the name, the request or as an id prefix; ``before`` is the previous page's last time."""
    return await db.fetch(Q["search_runs"], {
        "tenant_id": tenant_id, "statuses": statuses or None, "since": since, "until": until,
        "text": like_escape(text) if text else None, "before": before, "limit": limit})


def like_escape(text: str) -> str:
    """Search text is matched literally: % and _ are not wildcards."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


async def plan_versions(db: Database, run_id: uuid.UUID) -> list[Row]:
    """Every version of the run's plan, oldest first, with the reason it was made."""
    return await db.fetch(Q["plan_versions"], {"run_id": run_id})


async def run_model_calls(db: Database, run_id: uuid.UUID) -> list[Row]:
    """The run's recorded model calls, in the order they were made."""
    return await db.fetch(Q["run_llm_calls"], {"run_id": run_id})


async def waiting_approvals(db: Database, run_id: uuid.UUID) -> list[str]:
    """The ids of the run's steps waiting for a person's approval, in step order."""
    rows = await db.fetch(Q["run_waiting_approvals"], {"run_id": run_id})
    return [str(r["step_id"]) for r in rows]


async def last_event(db: Database, run_id: uuid.UUID) -> Row | None:
    """The run's newest event (type, payload, time), or None before its first."""
    return await db.fetchone(Q["last_event"], {"run_id": run_id})


async def step_warning_events(
    db: Database, run_id: uuid.UUID, execution_ids: list[Any],
) -> list[Row]:
    """The warning events (blocked network, lost lease, restored workspace) of these step
    attempts of the run, in order."""
    return await db.fetch(Q["step_warning_events"], {"run_id": run_id, "ids": execution_ids})


async def step_execution(db: Database, run_id: uuid.UUID, execution_id: uuid.UUID) -> Row | None:
    """One step attempt's whole row, or None unless it belongs to the run."""
    return await db.fetchone(Q["step_execution"], {"run_id": run_id,
                                                   "execution_id": execution_id})
