"""Snapshots of step workspaces, recorded in the database: the executor's hooks,
retention, and the garbage collector.

The executor calls, around each step attempt (the task_execution row must exist)::

    await snapshot_before_step(db, store, workspace, session_id=s, execution_id=e,
                               policy=settings.snapshot_policy)
    result = await backend.execute(request)
    await snapshot_step(db, store, workspace, session_id=s, execution_id=e,
                        policy=settings.snapshot_policy, failed=not result.ok)

A snapshot whose hash equals a READY snapshot of the same session is not stored
again: the step is linked to the existing row (``reused=True``).

Concurrency: a capture registers the objects it will reference (under the GC lock,
shared) before it uploads or relies on any of them; the collector lists and deletes
under the same lock held exclusively. So an object is deleted only if no snapshot
row, committed or about to be, references it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from onebox.errors import Conflict
from onebox.objects.base import BLOB_PREFIX, MANIFEST_PREFIX, ObjectStore, manifest_key
from onebox.sandbox.snapshot_files import WorkspaceChanged
from onebox.sandbox.snapshot_manifest import Manifest
from onebox.sandbox.snapshots import (
    RestoreReport,
    SnapshotInfo,
    capture,
    restore,
    scan,
)
from onebox.store import snapshots as rows
from onebox.store.db import Database

log = logging.getLogger(__name__)
CHANGED_TRIES = 4  # a snapshot whose files change while it is copied is taken again
CHANGED_PAUSE_S = 0.05  # before the second try; twice that before the third...

Policy = Literal["always", "on_failure", "never"]
DELETE_CONCURRENCY = 8


@dataclass(frozen=True)
class SnapshotRecord:
    """A snapshot row a step now points at. ``info`` is None when an existing row was reused."""

    id: uuid.UUID
    sha256: str
    reused: bool
    info: SnapshotInfo | None = None


@dataclass(frozen=True)
class GcReport:
    expired_snapshots: int
    objects_seen: int
    objects_kept: int
    objects_deleted: tuple[str, ...]
    dry_run: bool = False


async def record_snapshot(
    db: Database,
    store: ObjectStore,
    workspace_dir: Path,
    *,
    session_id: str,
    execution_id: uuid.UUID | None = None,
    kind: rows.Kind = "manual",
    reuse: bool = True,
    snapshot_id: uuid.UUID | None = None,
) -> SnapshotRecord:
    """Capture ``workspace_dir``, store it, write its row and link the execution (if any).
    ``snapshot_id``: the new row's id, when the caller must know it before the row exists
    (an identical snapshot already stored is reused under its own id). A file that changes
    while it is copied (a parallel step of the session writing) makes the snapshot start
    again, up to ``CHANGED_TRIES`` times in all."""
    for attempt in range(1, CHANGED_TRIES + 1):
        try:
            return await _record_once(db, store, workspace_dir, session_id=session_id,
                                      execution_id=execution_id, kind=kind, reuse=reuse,
                                      snapshot_id=snapshot_id)
        except WorkspaceChanged as exc:
            if attempt == CHANGED_TRIES:
                raise
            log.info("snapshot of session %s taken again (%d of %d): %s", session_id,
                     attempt + 1, CHANGED_TRIES, exc)
            await asyncio.sleep(CHANGED_PAUSE_S * attempt)
    raise AssertionError("unreachable")


async def _record_once(
    db: Database, store: ObjectStore, workspace_dir: Path, *, session_id: str,
    execution_id: uuid.UUID | None, kind: rows.Kind, reuse: bool,
    snapshot_id: uuid.UUID | None,
) -> SnapshotRecord:
    manifest = await asyncio.to_thread(_scan_and_digest, workspace_dir)
    pre = kind == "pre"
    if reuse:
        async with db.connection() as conn:
            existing = await rows.reuse(
                conn, session_id=session_id, sha256=manifest.sha256, execution_id=execution_id,
                pre=pre, event={"sha256": manifest.sha256, "reused": True, "stored_bytes": 0})
        if existing is not None:
            return SnapshotRecord(existing, manifest.sha256, reused=True)
    snapshot_id = snapshot_id or uuid.uuid4()
    async with db.connection() as conn:
        await rows.register(
            conn, snapshot_id=snapshot_id, session_id=session_id, execution_id=execution_id,
            kind=kind, sha256=manifest.sha256, manifest_key=manifest_key(manifest.sha256),
            total_bytes=manifest.total_bytes, file_count=len(manifest.files()),
            object_keys=manifest.object_keys())
    try:
        async with db.connection() as conn:
            present = await rows.stored_keys(conn, manifest.object_keys())
        info = await capture(store, workspace_dir, manifest=manifest, present=present)
    except BaseException:
        await _forget(db, snapshot_id)
        raise
    async with db.connection() as conn:
        await rows.finish(
            conn, snapshot_id, stored_bytes=info.stored_bytes, duration_ms=info.duration_ms,
            execution_id=execution_id, pre=pre,
            event={"sha256": info.sha256, "reused": False, "file_count": info.file_count,
                   "bytes": info.bytes, "stored_bytes": info.stored_bytes})
    return SnapshotRecord(snapshot_id, info.sha256, reused=False, info=info)


def _scan_and_digest(workspace_dir: Path) -> Manifest:
    """Scan, and compute the manifest's canonical bytes, digest and keys in the same thread:
    for 20,000 files they take tens of ms, which must not land on the event loop."""
    manifest = scan(workspace_dir)
    _ = manifest.sha256, manifest.object_keys()
    return manifest


async def _forget(db: Database, snapshot_id: uuid.UUID) -> None:
    """Drop the row of a capture that failed; a leftover PENDING row expires anyway."""
    try:
        async with db.transaction() as conn:
            await rows.delete(conn, snapshot_id)
    except Exception:  # noqa: BLE001 - the capture's own error is the one to report
        log.warning("could not delete pending snapshot %s; it will expire", snapshot_id,
                    exc_info=True)


async def snapshot_before_step(
    db: Database,
    store: ObjectStore,
    workspace_dir: Path,
    *,
    session_id: str,
    execution_id: uuid.UUID,
    policy: Policy,
    snapshot_id: uuid.UUID | None = None,
) -> uuid.UUID | None:
    """Snapshot the step's inputs; sets task_execution.pre_snapshot_id. None if policy is never."""
    if policy == "never":
        return None
    record = await record_snapshot(db, store, workspace_dir, session_id=session_id,
                                   execution_id=execution_id, kind="pre",
                                   snapshot_id=snapshot_id)
    return record.id


async def snapshot_step(
    db: Database,
    store: ObjectStore,
    workspace_dir: Path,
    *,
    session_id: str,
    execution_id: uuid.UUID,
    policy: Policy,
    failed: bool,
    snapshot_id: uuid.UUID | None = None,
) -> uuid.UUID | None:
    """Snapshot the step's outputs and set task_execution.snapshot_id; return the snapshot id.

    ``always``: every attempt. ``on_failure``: only failed attempts; a succeeded attempt's
    pre-execution snapshot is dropped too (unless another step uses it). ``never``: nothing.
    """
    if policy == "never":
        return None
    if policy == "on_failure" and not failed:
        await _drop_pre(db, execution_id)
        return None
    record = await record_snapshot(db, store, workspace_dir, session_id=session_id,
                                   execution_id=execution_id, kind="post",
                                   snapshot_id=snapshot_id)
    return record.id


async def _drop_pre(db: Database, execution_id: uuid.UUID) -> None:
    async with db.transaction() as conn:
        execution = await rows.get_execution(conn, execution_id)
        if execution["pre_snapshot_id"] is not None:
            await rows.delete_unshared_pre(conn, execution["pre_snapshot_id"], execution_id)


async def find_snapshot(db: Database, ref: str | uuid.UUID) -> rows.Row:
    """One snapshot's row by id or unique id prefix (NotFound / Conflict otherwise)."""
    async with db.connection() as conn:
        return await rows.get(conn, ref)


async def list_snapshots(db: Database, *, session_id: str | None = None,
                         execution_id: uuid.UUID | None = None, run_id: uuid.UUID | None = None,
                         limit: int = 50) -> list[rows.Row]:
    """Snapshots, newest first, narrowed by session, execution or run."""
    async with db.connection() as conn:
        return await rows.list_snapshots(conn, session_id=session_id, limit=limit,
                                         execution_id=execution_id, run_id=run_id)


async def restore_snapshot(
    db: Database, store: ObjectStore, ref: str | uuid.UUID, into_dir: Path
) -> RestoreReport:
    """Restore the snapshot with this id (or unique id prefix) into an empty directory."""
    async with db.connection() as conn:
        row = await rows.get(conn, ref)
    if row["status"] != "READY":
        raise Conflict(f"snapshot {row['id']} is still being written (status {row['status']})")
    return await restore(store, str(row["sha256"]).strip(), into_dir)


async def expire_snapshots(
    db: Database, *, keep_last: int = 0, ttl_s: float | None = None,
    pending_grace_s: float = 3600.0,
) -> list[uuid.UUID]:
    """Delete snapshot rows past retention: beyond the newest ``keep_last`` per session
    (0 keeps all), older than ``ttl_s``, or PENDING for longer than ``pending_grace_s``."""
    async with db.transaction() as conn:
        return await rows.expire(conn, keep_last=keep_last, ttl_s=ttl_s,
                                 pending_grace_s=pending_grace_s)


async def missing_objects(db: Database, store: ObjectStore) -> list[str]:
    """Objects the database says are stored that the store lacks (deleted by hand, a store
    other hosts do not share, a bucket restored from an older backup), sorted."""
    async with db.connection() as conn:
        expected = await rows.expected_keys(conn)
    listed = set(await store.list(BLOB_PREFIX)) | set(await store.list(MANIFEST_PREFIX))
    return sorted(expected - listed)


async def collect_garbage(db: Database, store: ObjectStore, *, dry_run: bool = False) -> GcReport:
    """Delete every blob and manifest that no snapshot row references."""
    async with db.transaction() as conn:
        await rows.lock_for_gc(conn)
        report = await collect_locked(conn, store, dry_run=dry_run)
    if report.objects_deleted:
        log.info("snapshot gc %s %d unreferenced objects", "found" if dry_run else "deleted",
                 len(report.objects_deleted))
    return report


async def collect_locked(conn: rows.Conn, store: ObjectStore, *, dry_run: bool = False) -> GcReport:
    """The collection itself; ``conn`` must be in a transaction holding the GC lock."""
    keep = await rows.referenced_keys(conn)
    listed = await store.list(BLOB_PREFIX) + await store.list(MANIFEST_PREFIX)
    dead = tuple(key for key in listed if key not in keep)
    if not dry_run:
        await _delete_all(store, dead)
    return GcReport(0, len(listed), len(listed) - len(dead), dead, dry_run)


async def _delete_all(store: ObjectStore, keys: tuple[str, ...]) -> None:
    gate = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def one(key: str) -> None:
        async with gate:
            await store.delete(key)

    await asyncio.gather(*(one(key) for key in keys))


async def prune(
    db: Database, store: ObjectStore, *, keep_last: int = 0, ttl_s: float | None = None,
    dry_run: bool = False,
) -> GcReport:
    """Apply retention, then collect the objects nothing references any more."""
    expired = [] if dry_run else await expire_snapshots(db, keep_last=keep_last, ttl_s=ttl_s)
    report = await collect_garbage(db, store, dry_run=dry_run)
    return GcReport(len(expired), report.objects_seen, report.objects_kept,
                    report.objects_deleted, dry_run)
