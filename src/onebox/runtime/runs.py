"""Reading runs back, and changing them from outside a worker (cancel)."""

from __future__ import annotations

import uuid
from typing import Any

from onebox.errors import Conflict, NotFound, ValidationError
from onebox.runtime.archive import finish_run
from onebox.store import runs as store
from onebox.store.db import Database


def parse_run_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ValidationError(
            f"'{text}' is not a run id; run ids are UUIDs as printed by `onebox runs`",
            field="run_id",
        ) from None


async def get_run(db: Database, run_id: uuid.UUID) -> store.Row:
    async with db.connection() as conn:
        run = await store.fetch_one(conn, "get_run", {"run_id": run_id})
    if run is None:
        raise NotFound(f"run {run_id} does not exist; `onebox runs` lists the recent ones",
                       field="run_id")
    return run


async def list_runs(db: Database, *, status: str | None = None, limit: int = 20) -> list[store.Row]:
    async with db.connection() as conn:
        return await store.fetch_all(conn, "list_runs", {"status": status, "limit": limit})


async def run_steps(db: Database, run_id: uuid.UUID) -> list[store.Row]:
    async with db.connection() as conn:
        return await store.fetch_all(conn, "run_steps", {"run_id": run_id})


async def run_events(db: Database, run_id: uuid.UUID, *, after_seq: int = 0) -> list[store.Row]:
    async with db.connection() as conn:
        return await store.fetch_all(conn, "run_events", {"run_id": run_id, "after_seq": after_seq})


async def run_timeline(db: Database, run_id: uuid.UUID) -> dict[str, Any]:
    """The run with its step attempts: what `onebox show` prints and the API returns."""
    run = await get_run(db, run_id)
    return {"run": run, "steps": await run_steps(db, run_id)}


async def cancel_run(db: Database, run_id: uuid.UUID, *, reason: str = "cancelled by user") -> None:
    """Cancel a run: queued steps are dropped, running ones are stopped by their workers."""
    async with db.transaction() as conn:
        run = await store.fetch_one(conn, "lock_run", {"run_id": run_id})
        if run is None:
            raise NotFound(f"run {run_id} does not exist", field="run_id")
        if run["status"] in store.TERMINAL_RUN_STATES:
            raise Conflict(f"run {run_id} is already {run['status']}; only unfinished runs can be "
                           "cancelled", field="run_id")
        await finish_run(conn, run, "CANCELLED", reason)
