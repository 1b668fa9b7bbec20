"""Cron schedules that submit a plan. Each slot fires exactly once, however many workers run.

Exactly-once comes from the database, not from a lock in memory: firing a slot
inserts ``(schedule_id, slot)`` into ``schedule_fires``, whose primary key lets
only one worker's insert succeed; that insert and the run it submits commit
together.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from croniter import croniter
from psycopg.types.json import Jsonb

from onebox.agent.plan import Plan, parse_plan
from onebox.config import Settings
from onebox.errors import Conflict, NotFound, ValidationError
from onebox.runtime.services.submission import submit_plan_in
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)


def next_slot(cron: str, after: dt.datetime) -> dt.datetime:
    """The first cron slot strictly after ``after`` (UTC)."""
    if not croniter.is_valid(cron):
        raise ValidationError(f"'{cron}' is not a cron expression (five fields: minute hour "
                              "day-of-month month day-of-week, e.g. '*/15 * * * *')", field="cron")
    value: dt.datetime = croniter(cron, after.astimezone(dt.UTC)).get_next(dt.datetime)
    return value


async def add_schedule(
    db: Database, name: str, cron: str, plan: Plan, *, tenant_id: str = "default",
    now: dt.datetime | None = None,
) -> store.Row:
    first = next_slot(cron, now or dt.datetime.now(dt.UTC))
    async with db.transaction() as conn:
        row = await store.fetch_one(conn, "insert_schedule", {
            "id": uuid.uuid4(), "tenant_id": tenant_id, "name": name, "cron": cron,
            "plan": Jsonb(plan.to_data()), "next_at": first})
    if row is None:
        raise Conflict(f"a schedule named '{name}' exists already; remove it first", field="name")
    return row


async def list_schedules(db: Database, *, tenant_id: str | None = None) -> list[store.Row]:
    async with db.connection() as conn:
        return await store.fetch_all(conn, "list_schedules", {"tenant_id": tenant_id})


async def remove_schedule(db: Database, name: str, *, tenant_id: str = "default") -> None:
    async with db.transaction() as conn:
        if await store.fetch_one(conn, "delete_schedule", {"name": name, "tenant_id": tenant_id}) is None:
            raise NotFound(f"no schedule named '{name}'; `onebox schedule list` shows them",
                           field="name")


async def fire_due_chore(db: Database, settings: Settings) -> bool:
    """The worker's chore (the ``schedules`` entry point of ``onebox.chores``): fire what is
    due; True when a run was submitted."""
    return bool(await fire_due(db, settings))


async def fire_due(db: Database, settings: Settings, *, limit: int = 20) -> list[uuid.UUID]:
    """Submit a run for every due slot this worker wins; returns the runs submitted."""
    async with db.connection() as conn:
        due = await store.fetch_all(conn, "due_schedules", {"limit": limit})
    fired = []
    for schedule in due:
        run_id = await _fire(db, settings, schedule)
        if run_id is not None:
            fired.append(run_id)
    return fired


async def _fire(db: Database, settings: Settings, schedule: dict[str, Any]) -> uuid.UUID | None:
    slot = schedule["next_at"]
    async with db.transaction() as conn:
        # Missed slots (all workers down) are not replayed: the next slot is after now.
        later = next_slot(schedule["cron"], max(slot, dt.datetime.now(dt.UTC)))
        await store.execute(conn, "advance_schedule", {"id": schedule["id"], "slot": slot,
                                                       "next_at": later})
        if await store.fetch_one(conn, "claim_slot", {"schedule_id": schedule["id"],
                                                      "slot": slot}) is None:
            return None
        submitted = await submit_plan_in(
            conn, settings, parse_plan(schedule["plan"]), name=schedule["name"],
            idempotency_key=f"schedule:{schedule['id']}:{slot.isoformat()}",
            tenant_id=schedule["tenant_id"])
        await store.execute(conn, "link_slot", {"schedule_id": schedule["id"], "slot": slot,
                                                "run_id": submitted.run_id})
    log.info("schedule %s fired slot %s as run %s", schedule["name"], slot, submitted.run_id)
    return submitted.run_id
