"""Retention: finished runs past their age or count are removed whole.

    rule = RetentionRule(max_age_s=30 * 86400, max_runs=None)
    report = await collect(db, objects, rule)            # what `onebox gc` and workers call

A run goes together with everything that references it: its events, plans, attempts
(with their approvals), llm_calls, sessions and snapshots, and then the snapshot objects
no other snapshot references (content-addressed objects are shared: a blob another run's
snapshot uses is kept). Only terminal runs (SUCCEEDED, FAILED, DEAD, CANCELLED) go, never
one with an ACTIVE session; schedules, knowledge and memories stay.

One pass at a time: a pass holds a PostgreSQL advisory lock (workers skip when another
pass holds it; the CLI waits), and locks its runs with SKIP LOCKED, so no two passes ever
delete the same rows. Runs go in batches of ``batch_runs``, one short transaction each,
so a pass never holds locks that delay other runs. Objects are deleted after their rows,
under the snapshot GC lock, and only if no snapshot references them by then.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field, fields, replace
from typing import Any

import psycopg

from onebox.config import RetentionSettings, Settings
from onebox.errors import OneboxError
from onebox.objects.base import ObjectStore
from onebox.objects.registry import get_object_store
from onebox.store import snapshots as snapshot_rows
from onebox.store.db import Database
from onebox.store.queries import load_queries

log = logging.getLogger(__name__)

Q = load_queries("retention")
RETENTION_LOCK_KEY = 0x0B0B5A02  # pg advisory lock held by the one running retention pass
MAX_LISTED_RUNS = 1000  # run ids a report lists; the counts cover every run


@dataclass(frozen=True)
class RetentionRule:
    """Remove terminal runs that ended more than ``max_age_s`` ago, or that are beyond the
    newest ``max_runs`` runs of their tenant. None turns a rule off."""

    max_age_s: float | None = None
    max_runs: int | None = None

    @property
    def enabled(self) -> bool:
        return self.max_age_s is not None or self.max_runs is not None

    @classmethod
    def from_settings(cls, retention: RetentionSettings) -> RetentionRule:
        days = retention.max_age_days
        return cls(None if days is None else days * 86400.0, retention.max_runs)


@dataclass(frozen=True)
class RetentionReport:
    """What a pass removed (or, with dry_run, would remove), table by table."""

    runs: int = 0
    events: int = 0
    attempts: int = 0
    plans: int = 0
    llm_calls: int = 0
    sessions: int = 0
    snapshots: int = 0
    objects_deleted: int = 0
    run_ids: tuple[str, ...] = field(default=())
    dry_run: bool = False
    skipped: bool = False  # another pass held the lock

    def plus(self, other: RetentionReport) -> RetentionReport:
        sums = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)
                if f.name not in ("run_ids", "dry_run", "skipped")}
        ids = (self.run_ids + other.run_ids)[:MAX_LISTED_RUNS]
        return replace(self, **sums, run_ids=ids)

    def to_json(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in fields(self)}


async def collect(
    db: Database, objects: ObjectStore, rule: RetentionRule, *, dry_run: bool = False,
    batch_runs: int = 100, wait: bool = True,
) -> RetentionReport:
    """One retention pass. ``wait=False`` returns a ``skipped`` report at once if another
    pass is running; ``dry_run`` only counts."""
    if not rule.enabled:
        return RetentionReport(dry_run=dry_run)
    if dry_run:
        return await _preview(db, rule)
    async with db.connection() as lock_conn:
        if not await _lock(lock_conn, wait=wait):
            return RetentionReport(skipped=True)
        try:
            return await _delete_all(db, objects, rule, batch_runs)
        finally:
            await lock_conn.execute(Q["unlock"], {"key": RETENTION_LOCK_KEY})


async def _lock(conn: Any, *, wait: bool) -> bool:
    if wait:
        await conn.execute(Q["lock"], {"key": RETENTION_LOCK_KEY})
        return True
    row = await (await conn.execute(Q["try_lock"], {"key": RETENTION_LOCK_KEY})).fetchone()
    return bool(row["locked"])


async def _delete_all(
    db: Database, objects: ObjectStore, rule: RetentionRule, batch_runs: int
) -> RetentionReport:
    total = RetentionReport()
    while True:
        batch, keys = await _delete_batch(db, rule, batch_runs)
        if batch.runs == 0:
            return total
        deleted = await _delete_objects(db, objects, keys)
        total = total.plus(replace(batch, objects_deleted=deleted))
        log.info("retention removed %d runs (%d events, %d snapshots, %d objects)",
                 batch.runs, batch.events, batch.snapshots, deleted)


async def _delete_batch(
    db: Database, rule: RetentionRule, batch_runs: int
) -> tuple[RetentionReport, list[str]]:
    """Remove up to ``batch_runs`` runs in one transaction; return the counts and the
    object keys only they referenced."""
    async with db.transaction() as conn:
        candidates = await _ids(conn, "candidates", _rule_params(rule, batch_runs))
        ids = await _ids(conn, "lock_runs", {"ids": candidates}) if candidates else []
        if not ids:
            return RetentionReport(), []
        report, snapshot_ids, keys = await _measure(conn, ids)
        await conn.execute(Q["delete_snapshots"], {"snapshot_ids": snapshot_ids})
        await conn.execute(Q["delete_sessions"], {"ids": ids})
        await conn.execute(Q["delete_events"], {"ids": ids})
        await conn.execute(Q["delete_runs"], {"ids": ids})
    return report, keys


async def _preview(db: Database, rule: RetentionRule) -> RetentionReport:
    async with db.connection() as conn:
        ids = await _ids(conn, "candidates", _rule_params(rule, None))
        if not ids:
            return RetentionReport(dry_run=True)
        report, _, keys = await _measure(conn, ids)
    return replace(report, objects_deleted=len(keys), dry_run=True)


async def _measure(
    conn: Any, ids: list[uuid.UUID]
) -> tuple[RetentionReport, list[uuid.UUID], list[str]]:
    """Counts per table for these runs, their snapshots, and the keys only those use."""
    counts = await (await conn.execute(Q["counts"], {"ids": ids})).fetchone()
    snapshot_ids = await _ids(conn, "doomed_snapshots", {"ids": ids})
    cur = await conn.execute(Q["object_keys"], {"snapshot_ids": snapshot_ids, "ids": ids})
    keys = [str(r["key"]) for r in await cur.fetchall()]
    report = RetentionReport(
        runs=len(ids), events=int(counts["events"]), attempts=int(counts["attempts"]),
        plans=int(counts["plans"]), llm_calls=int(counts["llm_calls"]),
        sessions=int(counts["sessions"]), snapshots=len(snapshot_ids),
        run_ids=tuple(str(i) for i in ids[:MAX_LISTED_RUNS]))
    return report, snapshot_ids, keys


async def _delete_objects(db: Database, objects: ObjectStore, keys: list[str]) -> int:
    """Delete the objects no snapshot references, under the snapshot GC lock: a capture
    that registers one of these keys meanwhile keeps it."""
    if not keys:
        return 0
    async with db.transaction() as conn:
        await snapshot_rows.lock_for_gc(conn)
        cur = await conn.execute(Q["still_referenced"], {"keys": keys})
        kept = {str(r["key"]) for r in await cur.fetchall()}
        dead = [key for key in keys if key not in kept]
        for key in dead:
            await objects.delete(key)
    return len(dead)


async def expire_uploads(db: Database, objects: ObjectStore, ttl_s: float) -> int:
    """Remove uploads no run named within ``ttl_s``, and their bytes when nothing else (a
    run's files, a snapshot, a newer upload of the same bytes) uses them. Returns how many."""
    async with db.transaction() as conn:
        cur = await conn.execute(Q["expire_uploads"], {"ttl_s": ttl_s})
        keys = sorted({str(r["key"]) for r in await cur.fetchall()})
    if keys:
        await _delete_objects(db, objects, keys)
    return len(keys)


async def _ids(conn: Any, name: str, params: dict[str, Any]) -> list[uuid.UUID]:
    cur = await conn.execute(Q[name], params)
    return [row["id"] for row in await cur.fetchall()]


def _rule_params(rule: RetentionRule, limit: int | None) -> dict[str, Any]:
    return {"max_age_s": rule.max_age_s, "max_runs": rule.max_runs, "limit": limit}


class RetentionChore:
    """The periodic pass a worker applies: every ``retention.interval_s``, if the settings
    set a rule, and only when no other worker's pass is running."""

    def __init__(self, db: Database, settings: Settings, objects: ObjectStore | None) -> None:
        self.db, self.settings, self.objects = db, settings, objects

    async def loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention.interval_s)
            await self.run_once()

    async def run_once(self) -> RetentionReport | None:
        rule = RetentionRule.from_settings(self.settings.retention)
        objects = self.objects or get_object_store(self.settings)
        try:
            await expire_uploads(self.db, objects, self.settings.retention.upload_ttl_h * 3600)
            if not rule.enabled:
                return None
            return await collect(self.db, objects, rule, wait=False,
                                 batch_runs=self.settings.retention.batch_runs)
        except (psycopg.Error, OneboxError, OSError):
            log.exception("retention pass failed (the next one retries in %.0f s)",
                          self.settings.retention.interval_s)
            return None
        finally:
            if self.objects is None:
                await objects.close()
