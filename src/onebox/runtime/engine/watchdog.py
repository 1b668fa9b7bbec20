"""The watchdog: a run that has been silent (no event) for `runtime.stale_after_s` gets a
`run_stale` event, once, and shows in `onebox runs --stale` until something happens again."""

from __future__ import annotations

import logging

from onebox.config import Settings
from onebox.runtime.engine.submit import queue_missing_steps
from onebox.store import runs as store
from onebox.store.db import Database

log = logging.getLogger(__name__)


async def flag_stale_runs(db: Database, settings: Settings) -> int:
    """Append a `run_stale` event to each silent unfinished run; returns how many."""
    async with db.transaction() as conn:
        silent = await store.fetch_all(conn, "silent_runs", {
            "stale_after_s": settings.runtime.stale_after_s})
        for run in silent:
            await store.append_event(conn, run["id"], "run_stale", {
                "silent_since": run["last_at"].isoformat(), "last_event": run["last_type"],
                "stale_after_s": settings.runtime.stale_after_s,
            }, trace_id=run["trace_id"])
            log.warning("run %s has been silent since %s (last event %s)", run["id"],
                        run["last_at"], run["last_type"])
    for run in silent:  # a submitter that died between its batches left steps unqueued
        await queue_missing_steps(db, settings, run["id"])
    return len(silent)
